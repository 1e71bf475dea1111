"""Search index: exact search equals brute force, approximate kinds against exact, the index
refuses another model, texts map back to input rows, and the `index build` / `search` commands."""

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

faiss = pytest.importorskip("faiss")

from helpers import make_tiny_model_dir  # noqa: E402

from dclr.cli.main import app  # noqa: E402
from dclr.data.readers import open_source  # noqa: E402
from dclr.errors import InputError  # noqa: E402
from dclr.indexing.fingerprint import model_fingerprint  # noqa: E402
from dclr.indexing.index import (  # noqa: E402
    EXACT_MAX_VECTORS,
    IndexParams,
    SearchIndex,
    build_faiss,
    build_index,
)
from dclr.models.encoder import SentenceEncoder  # noqa: E402

runner = CliRunner()
CORPUS = [
    "A man is playing a guitar.",
    "",
    "Two dogs run on the beach.",
    "The cat sleeps on the sofa.",
    "A woman slices an onion.",
    "   ",
    "Kids are playing football in a park.",
    "The stock market fell sharply today.",
]


def unit_vectors(n, dim, seed=0):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute_force(corpus, queries, k):
    scores = queries @ corpus.T  # (q, n)
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def recall_at(approx, exact):
    return np.mean([len(set(a) & set(e)) / len(e) for a, e in zip(approx, exact, strict=True)])


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("\n".join(CORPUS) + "\n")
    return path


@pytest.fixture(scope="module")
def index_dir(model_dir, corpus_file, tmp_path_factory):
    folder = tmp_path_factory.mktemp("idx") / "index"
    build_index(str(model_dir), open_source(corpus_file), folder, IndexParams("flat"), "mean")
    return folder


def test_flat_index_equals_brute_force():
    corpus, queries = unit_vectors(500, 16), unit_vectors(20, 16, seed=1)
    index = build_faiss(corpus, IndexParams("flat"))
    scores, ids = index.search(queries, 10)
    np.testing.assert_array_equal(ids, brute_force(corpus, queries, 10))
    np.testing.assert_allclose(scores, np.take_along_axis(queries @ corpus.T, ids, 1), atol=1e-5)


def test_ivf_searching_every_cell_is_exact_and_approximate_kinds_recall_well():
    """On unit vectors L2 distance ranks as inner product does, so equal ids alone would not
    tell an L2 index from an inner-product one: the scores must be the cosines too."""
    corpus, queries = unit_vectors(2000, 16), unit_vectors(50, 16, seed=1)
    exact = brute_force(corpus, queries, 10)
    cosines = queries @ corpus.T  # (q, n)
    every_cell = build_faiss(corpus, IndexParams("ivf", ivf_nlist=20, ivf_nprobe=20))
    scores, ids = every_cell.search(queries, 10)
    np.testing.assert_array_equal(ids, exact)
    np.testing.assert_allclose(scores, np.take_along_axis(cosines, ids, 1), atol=1e-5)
    hnsw = build_faiss(corpus, IndexParams("hnsw"))
    scores, ids = hnsw.search(queries, 10)
    assert recall_at(ids, exact) >= 0.95
    np.testing.assert_allclose(scores, np.take_along_axis(cosines, ids, 1), atol=1e-5)
    few_cells = build_faiss(corpus, IndexParams("ivf", ivf_nlist=20, ivf_nprobe=1))
    assert recall_at(few_cells.search(queries, 10)[1], exact) < 1.0  # nprobe does take effect


def test_auto_kind_by_corpus_size():
    assert IndexParams().resolve(EXACT_MAX_VECTORS).kind == "flat"
    assert IndexParams().resolve(EXACT_MAX_VECTORS + 1).kind == "hnsw"
    ivf = IndexParams("ivf").resolve(10_000)
    assert ivf.ivf_nlist == 256  # min(4 * sqrt(n) = 400, n // 39 = 256)
    with pytest.raises(InputError, match="unknown index kind"):
        IndexParams("lsh")  # type: ignore[arg-type]


def test_index_folder_maps_ids_to_rows_and_texts(model_dir, index_dir):
    meta = json.loads((index_dir / "index.json").read_text())
    assert meta["count"] == 6 and meta["params"]["kind"] == "flat" and meta["dim"] == 32
    assert len(meta["model_fingerprint"]) == 64
    searcher = SearchIndex(index_dir)
    assert [searcher.record(i)["row"] for i in range(6)] == [0, 2, 3, 4, 6, 7]
    assert searcher.record(3)["text"] == CORPUS[4]
    encoder = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    texts = [t for t in CORPUS if t.strip()]
    vectors = encoder.encode(texts, normalize=True)
    hits = searcher.search(vectors[[2]], k=50)[0]  # k beyond the corpus: all 6, best first
    assert len(hits) == 6 and hits[0].text == texts[2] and hits[0].row == 3
    np.testing.assert_allclose(
        [h.score for h in hits], np.sort(vectors @ vectors[2])[::-1], atol=1e-5
    )


def test_fingerprint_follows_weights_not_paths(model_dir, tmp_path):
    copy = shutil.copytree(model_dir, tmp_path / "renamed")
    same = model_fingerprint(SentenceEncoder.from_pretrained(copy, pooler="mean"))
    assert same == model_fingerprint(SentenceEncoder.from_pretrained(model_dir, pooler="mean"))
    assert same != model_fingerprint(SentenceEncoder.from_pretrained(model_dir, pooler="cls"))
    other = make_tiny_model_dir(tmp_path / "other", seed=1)
    assert same != model_fingerprint(SentenceEncoder.from_pretrained(other, pooler="mean"))


def test_index_refuses_another_model(index_dir, tmp_path):
    other = make_tiny_model_dir(tmp_path / "other", seed=1)
    fingerprint = model_fingerprint(SentenceEncoder.from_pretrained(other, pooler="mean"))
    with pytest.raises(InputError, match="built with model") as err:
        SearchIndex(index_dir).check_model(fingerprint, str(other))
    assert "rebuild the index" in str(err.value)
    result = runner.invoke(
        app, ["search", "guitar", "--index", str(index_dir), "--model", str(other)]
    )
    assert result.exit_code == 2 and "not comparable" in result.output


def test_not_an_index_folder(tmp_path):
    with pytest.raises(InputError, match="no index.json"):
        SearchIndex(tmp_path)


def test_cli_build_and_search(model_dir, corpus_file, tmp_path):
    out = tmp_path / "idx"
    built = runner.invoke(
        app,
        ["index", "build", str(model_dir), str(corpus_file), "--out", str(out), "--kind", "hnsw",
         "--pooler", "mean"],
    )  # fmt: skip
    assert built.exit_code == 0, built.output
    assert "hnsw index of 6 vectors" in built.output
    found = runner.invoke(app, ["search", CORPUS[3], "--index", str(out), "-k", "2", "--json"])
    assert found.exit_code == 0, found.output
    body = json.loads(found.output)
    assert body["results"][0]["text"] == CORPUS[3] and body["results"][0]["row"] == 3
    assert body["results"][0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert len(body["results"]) == 2
    info = runner.invoke(app, ["index", "info", str(out)])
    assert info.exit_code == 0 and '"kind": "hnsw"' in info.output
    import dclr

    assert json.loads(info.output) == dclr.index_info(out)  # `dclr index info` from Python


def test_dedup_leaves_copies_out_of_the_results(model_dir, tmp_path):
    """Issue 27 item 7: duplicates filled the search results. `--dedup` keeps the first of
    rows equal after lower-casing and collapsing whitespace; hits keep their input rows."""
    lines = ["A man plays a guitar.", "a  man plays a GUITAR.", "", "A dog runs.",
             "A man plays a guitar.", "The sky is blue."]  # fmt: skip
    corpus = tmp_path / "dups.txt"
    corpus.write_text("\n".join(lines) + "\n")
    out = tmp_path / "idx"
    built = runner.invoke(app, ["index", "build", str(model_dir), str(corpus), "--out", str(out),
                                "--pooler", "mean", "--dedup"])  # fmt: skip
    assert built.exit_code == 0, built.output
    assert "of 3 vectors" in built.output and "2 duplicate rows left out" in built.output
    searcher = SearchIndex(out)
    assert [searcher.record(i)["row"] for i in range(3)] == [0, 3, 5]
    assert searcher.meta["duplicates_left_out"] == 2
    found = runner.invoke(app, ["search", lines[0], "--index", str(out), "-k", "5", "--json"])
    rows = [hit["row"] for hit in json.loads(found.output)["results"]]
    assert sorted(rows) == [0, 3, 5]  # one hit per distinct text
    again = tmp_path / "all"  # without --dedup (reusing the encoded shards) every row is indexed
    shutil.copytree(out / "embeddings", again / "embeddings")
    built = runner.invoke(app, ["index", "build", str(model_dir), str(corpus), "--out",
                                str(again), "--pooler", "mean"])  # fmt: skip
    assert built.exit_code == 0 and "of 5 vectors" in built.output, built.output


def test_the_search_table_names_lines_as_encode_does(model_dir, corpus_file, tmp_path):
    """Issue 27 item 8: `search` showed 0-based rows where `encode` counts 1-based lines. A text
    input's hits are shown by line (row + 1); the JSON keeps the 0-based row."""
    out = tmp_path / "idx"
    built = runner.invoke(app, ["index", "build", str(model_dir), str(corpus_file), "--out",
                                str(out), "--pooler", "mean"])  # fmt: skip
    assert built.exit_code == 0, built.output
    found = runner.invoke(app, ["search", CORPUS[3], "--index", str(out), "-k", "1"],
                          env={"COLUMNS": "200"})  # fmt: skip
    assert found.exit_code == 0, found.output
    header = next(line for line in found.output.splitlines() if "score" in line)
    assert "line" in header and "row" not in header
    hit = next(line for line in found.output.splitlines() if CORPUS[3] in line and "│" in line)
    assert [c.strip() for c in hit.split("│")][1:4] == ["1", "1.0000", "4"]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_the_users_own_id_column_is_kept_in_the_results(model_dir, tmp_path, fmt):
    """Issue 38: `index build` dropped the user's id column; hits carried row numbers only.
    With --id-column each hit carries its row's id (numbers as JSON writes them)."""
    texts = ["A man plays a guitar.", "A dog runs.", "The sky is blue."]
    ids = ["doc-7", 42, "x/3"]
    corpus = tmp_path / f"docs.{fmt}"
    if fmt == "csv":
        corpus.write_text(
            "id,text\n" + "".join(f"{i},{t}\n" for i, t in zip(ids, texts, strict=True))
        )
    elif fmt == "jsonl":
        rows = [json.dumps({"id": i, "text": t}) for i, t in zip(ids, texts, strict=True)]
        corpus.write_text("\n".join(rows) + "\n")
    else:
        pa = pytest.importorskip("pyarrow")
        import pyarrow.parquet as pq

        table = pa.table({"id": [str(i) for i in ids], "text": texts})
        pq.write_table(table, corpus)
    out = tmp_path / "idx"
    built = runner.invoke(app, ["index", "build", str(model_dir), str(corpus), "--out", str(out),
                                "--pooler", "mean", "--column", "text", "--id-column", "id"])  # fmt: skip
    assert built.exit_code == 0, built.output
    found = runner.invoke(app, ["search", texts[1], "--index", str(out), "-k", "3", "--json"])
    hits = json.loads(found.output)["results"]
    assert hits[0]["text"] == texts[1] and hits[0]["doc_id"] == "42" and hits[0]["row"] == 1
    assert {h["doc_id"] for h in hits} == {"doc-7", "42", "x/3"}
    table = runner.invoke(app, ["search", texts[0], "--index", str(out), "-k", "1"])
    assert "doc-7" in table.output and "doc_id" in table.output  # named as in the JSON


def test_an_id_column_on_a_text_file_is_refused_before_encoding(model_dir, corpus_file, tmp_path):
    out = tmp_path / "idx"
    built = runner.invoke(app, ["index", "build", str(model_dir), str(corpus_file), "--out",
                                str(out), "--pooler", "mean", "--id-column", "id"])  # fmt: skip
    assert built.exit_code != 0 and "no id column" in built.output
    assert not (out / "embeddings").exists()  # nothing was encoded
