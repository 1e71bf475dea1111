"""Bounded memory on any line: the readers cut (and count) a text line longer than
`MAX_LINE_CHARS` and refuse a longer CSV/JSONL record by name; CR-only line endings end a line
like LF and CRLF do (universal newlines), in `rows`, `count` and the training corpus alike."""

from __future__ import annotations

import sys
import warnings

import pytest

from dclr.data import corpus as corpus_module
from dclr.data import readers
from dclr.data.corpus import TextFileCorpus
from dclr.data.readers import LongLinesCut, open_source
from dclr.errors import InputError

SMALL_LIMIT = 1000  # characters: the tests shrink the bound instead of writing megabytes


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(readers, "MAX_LINE_CHARS", SMALL_LIMIT)
    monkeypatch.setattr(corpus_module, "MAX_LINE_CHARS", SMALL_LIMIT)


def test_cr_only_text_file_has_one_row_per_line(tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(b"first line\rsecond line\rthird line\r")
    source = open_source(path)
    assert list(source.rows()) == ["first line", "second line", "third line"]
    assert source.count() == 3


@pytest.mark.parametrize("chunk", [None, 2])  # 2 bytes: "a\r" | "\nb" splits the CRLF
def test_mixed_line_endings_count_as_rows(tmp_path, monkeypatch, chunk):
    if chunk is not None:  # `count` reads in chunks: a CRLF across two is still one line end
        monkeypatch.setattr(readers, "_COUNT_CHUNK", chunk)
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"a\r\nb\rc\nd")
    source = open_source(path)
    assert list(source.rows()) == ["a", "b", "c", "d"]
    assert source.count() == 4


def test_cr_only_training_corpus_has_one_sentence_per_line(tmp_path):
    path = tmp_path / "mac.txt"
    path.write_bytes(b"first line\rsecond line\r\nthird line\r")
    assert list(TextFileCorpus(path)) == ["first line", "second line", "third line"]


def test_long_text_line_is_cut_and_counted(tmp_path, small_limit):
    path = tmp_path / "long.txt"
    path.write_text("short\n" + "x" * (5 * SMALL_LIMIT) + "\nafter\n")
    source = open_source(path)
    with pytest.warns(LongLinesCut, match=r"1 line\(s\) longer .*line 2"):
        rows = list(source.rows())
    assert rows == ["short", "x" * SMALL_LIMIT, "after"]
    assert source.count() == 3


def test_long_line_is_cut_on_a_character_boundary(tmp_path, small_limit):
    path = tmp_path / "long.txt"
    path.write_text("é" * (2 * SMALL_LIMIT) + "\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LongLinesCut)
        assert list(open_source(path).rows()) == ["é" * SMALL_LIMIT]


def test_invalid_utf8_is_still_named_by_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"one\ntwo\nbad \xff byte\n")
    with pytest.raises(InputError, match="not valid UTF-8") as err:
        list(open_source(path).rows())
    assert err.value.line == 3


@pytest.mark.parametrize("name", ["bad.csv", "bad.tsv"])
def test_invalid_utf8_in_a_table_is_named_by_its_own_line(tmp_path, name):
    """The decoder reads ahead in chunks: the line is counted as records are read, not taken
    from the reader's position when the decoder failed."""
    sep = "," if name.endswith(".csv") else "\t"
    rows = [f"row {i}{sep}{i}".encode() for i in range(2, 300)]
    rows[297] = b"caf\xe9" + sep.encode() + b"1"  # line 299 (the header is line 1)
    path = tmp_path / name
    path.write_bytes(b"text" + sep.encode() + b"n\n" + b"\n".join(rows) + b"\n")
    with pytest.raises(InputError, match="not valid UTF-8") as err:
        list(open_source(path, column="text").rows())
    assert err.value.line == 299


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("long.jsonl", '{"text": "ok"}\n{"text": "' + "x" * (5 * SMALL_LIMIT) + '"}\n', 2),
        ("long.csv", "text\nok\n" + "x" * (5 * SMALL_LIMIT) + "\n", 3),
    ],
)
def test_long_table_record_is_refused_by_name(tmp_path, small_limit, name, text, line):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=r"longer than 1,000 characters") as err:
        list(open_source(path, column="text").rows())
    assert err.value.line == line


def test_long_corpus_line_is_cut_and_counted(tmp_path, small_limit):
    path = tmp_path / "long.txt"
    path.write_text("short one\n" + "y" * (5 * SMALL_LIMIT) + "\nanother\n")
    corpus = TextFileCorpus(path)
    assert corpus.n_cut == 1
    assert [len(s) for s in corpus] == [9, SMALL_LIMIT, 7]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident pages from /proc")
def test_a_corpus_with_a_huge_line_does_not_keep_the_file_resident(tmp_path):
    """Issue 47 point 3: the line scan reads every page of the memory map, which then counted
    against the training run for its whole length (50 MB for a 50 MB line)."""

    def resident_mb() -> float:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096 / 2**20

    path = tmp_path / "corpus.txt"
    path.write_bytes(b"first line\n" + b"word " * 8_000_000 + b"\nlast line\n")  # a 40 MB line
    before = resident_mb()
    corpus = TextFileCorpus(path)
    assert resident_mb() - before < 10
    assert len(corpus) == 3 and corpus.n_cut == 1 and corpus[2] == "last line"
