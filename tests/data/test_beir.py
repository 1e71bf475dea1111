"""The BEIR reader names the file and line of every bad row; the built-in retrieval tasks are
deterministic, come from test/dev splits and never hold a query's own sentence in the corpus."""

from __future__ import annotations

import json

import pytest

from dclr.data.beir import load_beir, passage_text, write_beir
from dclr.data.paraphrases import normalize_text
from dclr.data.retrieval_tasks import assemble, build_task, write_task
from dclr.errors import ConfigError, InputError

CORPUS = {"d1": "a cat sleeps", "d2": "a dog runs"}
QUERIES = {"q1": "sleeping animal", "q2": "running animal", "q3": "not judged"}
QRELS = {"q1": {"d1": 1}, "q2": {"d2": 2, "d1": 0}}


@pytest.fixture
def folder(tmp_path):
    return write_beir(tmp_path / "beir", CORPUS, QUERIES, QRELS, "test")


def test_round_trip_keeps_judged_queries_in_file_order(folder):
    data = load_beir(folder)
    assert data.corpus_ids == ["d1", "d2"] and data.passages == ["a cat sleeps", "a dog runs"]
    assert data.query_ids == ["q1", "q2"]  # q3 has no qrels row: BEIR drops it
    assert data.qrels == QRELS


def test_title_and_text_are_joined_as_beir_does():
    assert passage_text("Cats", "They sleep.") == "Cats They sleep."
    assert passage_text("", " They sleep. ") == "They sleep."


def corrupt(folder, name, line, text):
    path = folder / name
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("name", "line", "text", "message"),
    [
        ("corpus.jsonl", 2, "{not json", "not valid JSON"),
        ("corpus.jsonl", 2, "", "blank line"),
        ("corpus.jsonl", 2, '{"_id": "d1", "text": "again"}', "repeats line 1"),
        ("corpus.jsonl", 1, '{"_id": "d1", "title": "t"}', "field 'text' must be a string"),
        ("queries.jsonl", 1, '{"_id": ["q1"], "text": "x"}', "field '_id' must be a string"),
        ("qrels/test.tsv", 1, "q1\td1\t1", "not the header"),
        ("qrels/test.tsv", 2, "q9\td1\t1", "query id 'q9' is not in queries.jsonl"),
        ("qrels/test.tsv", 2, "q1\td9\t1", "corpus id 'd9' is not in corpus.jsonl"),
        ("qrels/test.tsv", 2, "q1\td1\thigh", "not an integer"),
        ("qrels/test.tsv", 2, "q1 d1 1", "1 tab-separated fields"),
        ("qrels/test.tsv", 3, "q1\td1\t1", "judged already on line 2"),
    ],
)
def test_bad_rows_name_file_and_line(folder, name, line, text, message):
    path = corrupt(folder, name, line, text)
    with pytest.raises(InputError, match=message) as err:
        load_beir(folder)
    assert err.value.path == str(path) and err.value.line == line


def test_missing_split_lists_the_splits_held(folder):
    with pytest.raises(InputError, match=r"no qrels for split 'dev' \(splits here: test\)"):
        load_beir(folder, "dev")


def test_numeric_ids_are_read_as_text(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": 7, "text": "x"}) + "\n")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": 1, "text": "y"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n1\t7\t1\n")
    assert load_beir(tmp_path).qrels == {"1": {"7": 1}}


# ---- built-in tasks ----------------------------------------------------------------------------
def test_assemble_leaves_queries_out_of_the_corpus_and_keeps_the_best_grade():
    task = assemble(
        ["A b", "c", "d", "a  B"],  # "a  B" is "A b" after normalisation
        [("A b", "c", 1), ("A b", "c", 2), ("c", "d", 1), ("x", "A b", 1)],
    )
    assert list(task.corpus.values()) == ["d"]  # A b, c and x are queries
    assert task.queries == {"q0": "c"}  # A b's and x's passages are queries themselves
    assert task.qrels == {"q0": {"d0": 1}}


@pytest.mark.parametrize("name", ["paraphrase", "inli"])
@pytest.mark.parametrize("split", ["test", "dev"])
def test_built_tasks_are_deterministic_and_read_back(data_dir, tmp_path, name, split):
    first, task = write_task(name, data_dir, tmp_path / "a", split)
    second, _ = write_task(name, data_dir, tmp_path / "b", split)
    for file in ("corpus.jsonl", "queries.jsonl", f"qrels/{split}.tsv"):
        assert (first / file).read_bytes() == (second / file).read_bytes(), file
    data = load_beir(first, split)
    assert len(data.query_ids) == len(task.queries) > 300
    query_keys = {normalize_text(q) for q in data.queries}
    assert not query_keys & {normalize_text(p) for p in data.passages}
    assert all(max(docs.values()) >= 1 for docs in data.qrels.values())


def test_inli_grades_explicit_above_implied(data_dir):
    task = build_task("inli", data_dir, "test")
    assert {g for docs in task.qrels.values() for g in docs.values()} == {1, 2}


def test_no_train_split(data_dir):
    with pytest.raises(ConfigError, match="no train split"):
        build_task("paraphrase", data_dir, "train")
