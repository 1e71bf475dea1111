"""Training corpora: memory-mapped text files and the built-in STS corpus."""

import pytest

from dclr.data.corpus import ListCorpus, TextFileCorpus, load_corpus
from dclr.errors import InputError


def test_text_file_skips_and_counts_blank_lines(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("first sentence\n\n   \n\tsecond one \r\nthird\n")
    corpus = TextFileCorpus(path)
    assert list(corpus) == ["first sentence", "second one", "third"]
    assert corpus.n_skipped == 2


def test_text_file_without_final_newline(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("a\nb")
    assert list(TextFileCorpus(path)) == ["a", "b"]


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\ncaf\xe9 latin-1\n")
    with pytest.raises(InputError) as err:
        TextFileCorpus(path)
    assert err.value.line == 3
    assert str(path) in str(err.value) and "fix:" in str(err.value)


@pytest.mark.parametrize("content", [b"", b"\n\n  \n", b"only one\n"])
def test_empty_or_too_small_corpus(tmp_path, content):
    path = tmp_path / "empty.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match="corpus") as err:
        TextFileCorpus(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        TextFileCorpus(tmp_path / "nope.txt")


def test_list_corpus_counts_blank():
    corpus = ListCorpus(["a", " ", "b"])
    assert list(corpus) == ["a", "b"] and corpus.n_skipped == 1


def test_builtin_sts_corpus_is_every_distinct_sentence(data_dir):
    corpus = load_corpus("sts", data_dir)
    sentences = list(corpus)
    assert len(sentences) == len(set(sentences)) > 20000
    assert "A man is playing a guitar." in sentences
