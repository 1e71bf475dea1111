"""Training corpora: memory-mapped text files and the built-in STS corpus."""

import pytest

from dclr.data.corpus import ListCorpus, TextFileCorpus, load_corpus
from dclr.data.readers import open_source
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


def test_a_folder_given_as_the_corpus_is_named_as_a_folder(tmp_path):
    """It said "corpus file not found" of a folder that is there (a walkthrough's finding)."""
    with pytest.raises(InputError, match="the corpus is a folder, not a file"):
        TextFileCorpus(tmp_path)
    with pytest.raises(InputError, match="the input is a folder, not a file"):
        open_source(tmp_path)


def test_list_corpus_counts_blank():
    corpus = ListCorpus(["a", " ", "b"])
    assert list(corpus) == ["a", "b"] and corpus.n_skipped == 1


def test_builtin_sts_corpus_is_every_distinct_sentence(data_dir):
    corpus = load_corpus("sts", data_dir)
    sentences = list(corpus)
    assert len(sentences) == len(set(sentences)) > 20000
    assert "A man is playing a guitar." in sentences


# ---- tables: the readers every text input shares (issue 38 item 1) -----------------------------
TEXTS = ["a man plays a guitar", "the cat sleeps", "rain is expected", "markets fell today"]


def _tables(tmp_path):
    """The same four texts (and a blank one) as CSV, TSV, JSONL and Parquet, with an id column."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [*TEXTS[:2], "", *TEXTS[2:]]
    csv = tmp_path / "c.csv"
    csv.write_text("id,text\n" + "".join(f'{i},"{t}"\n' for i, t in enumerate(rows)))
    tsv = tmp_path / "c.tsv"
    tsv.write_text("id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t in enumerate(rows)))
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(rows)))
    parquet = tmp_path / "c.parquet"
    pq.write_table(pa.table({"id": list(range(len(rows))), "text": rows}), parquet)
    return [csv, tsv, jsonl, parquet]


def test_a_table_corpus_is_read_by_the_shared_readers(tmp_path):
    for path in _tables(tmp_path):
        corpus = load_corpus(str(path), column="text")
        assert list(corpus) == TEXTS and corpus.n_skipped == 1, path.name


def test_a_table_corpus_without_a_column_is_refused_with_its_columns(tmp_path):
    for path in _tables(tmp_path):
        with pytest.raises(InputError) as err:
            load_corpus(str(path))
        said = str(err.value)
        assert "needs --column" in said and "id, text" in said, said
        assert "dclr train: --set data.column=NAME" in said, said  # train has no --column


def test_a_column_is_refused_for_a_text_file_and_a_builtin_corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(TEXTS) + "\n")
    with pytest.raises(InputError, match="applies to csv/tsv/jsonl/parquet"):
        load_corpus(str(path), column="text")
    with pytest.raises(InputError, match="built-in corpus 'sts'"):
        load_corpus("sts", column="text")


def test_training_reads_data_column(tmp_path, tiny_dropout_model_dir):
    from dclr.driver import trainer_for
    from dclr.recipe import load_config

    jsonl = _tables(tmp_path)[2]
    config = load_config(
        None,
        {"model": str(tiny_dropout_model_dir), "model.pooler": "mean", "model.mlp_head": False,
         "data.corpus": str(jsonl), "data.column": "text", "batch_size": 2, "max_steps": 1,
         "eval_steps": 0, "test_eval": False, "output_dir": str(tmp_path / "run")},
    )  # fmt: skip
    trainer = trainer_for(config)
    report = trainer.run.data_report
    assert sorted(trainer.run.data) == sorted(TEXTS)
    assert report["lines"] == 4 and report["blank_skipped"] == 1
