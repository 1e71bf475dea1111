"""Retrieval metrics: hand-worked values, equality with trec_eval (pytrec_eval) on runs with ties,
graded and negative judgements, unretrieved relevant passages, all-zero and unjudged queries; the
bounded exact search equals a full sort; the evaluator equals sentence-transformers'."""

from __future__ import annotations

import functools
import json
import math
import operator
import random

import numpy as np
import pytest
import torch

from dclr.data.beir import write_beir
from dclr.evaluation.retrieval import (
    METRICS,
    added_up,
    average_precision,
    map_at_k,
    mrr_at_k,
    ndcg,
    ndcg_at_k,
    recall,
    recall_at_k,
    reciprocal_rank,
    retrieval_scores,
    trec_order,
)
from dclr.evaluation.retrieval_eval import RetrievalEvaluator, evaluate_index
from dclr.evaluation.search import RunningTopK

# pytrec_eval measure -> (our per-query function, k); MRR@10 is recip_rank on the top 10
TREC_MEASURES = {
    "ndcg_cut_10": (ndcg, 10),
    "map_cut_100": (average_precision, 100),
    "recall_1": (recall, 1),
    "recall_10": (recall, 10),
    "recall_100": (recall, 100),
}
ST_TOLERANCE = 1e-6  # issue 26: nDCG@10 equal to sentence-transformers' within 1e-6


# ---- hand-worked values ------------------------------------------------------------------------
def test_trec_order_breaks_ties_by_doc_id_descending():
    assert trec_order({"a": 0.5, "b": 0.5, "c": 0.9, "0": 0.5}) == ["c", "b", "a", "0"]


def test_metrics_on_a_hand_worked_list():
    ranked = ["x", "r2", "r1", "y"]  # x, y not judged; r1 grade 2, r2 grade 1, r3 (grade 1) missed
    rels = {"r1": 2, "r2": 1, "r3": 1, "z": 0}
    dcg = 0 + 1 / math.log2(3) + 2 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert ndcg(ranked, rels, 10) == pytest.approx(dcg / idcg, abs=1e-15)
    assert ndcg(ranked, rels, 1) == 0.0
    assert reciprocal_rank(ranked, rels, 10) == 0.5
    assert reciprocal_rank(ranked, rels, 1) == 0.0
    assert average_precision(ranked, rels, 100) == pytest.approx((1 / 2 + 2 / 3) / 3, abs=1e-15)
    assert average_precision(ranked, rels, 2) == pytest.approx((1 / 2) / 3, abs=1e-15)
    assert recall(ranked, rels, 1) == 0.0
    assert recall(ranked, rels, 3) == pytest.approx(2 / 3, abs=1e-15)


def test_negative_grades_add_no_gain_and_zero_only_queries_score_zero():
    assert ndcg(["bad", "good"], {"bad": -1, "good": 1}, 10) == pytest.approx(1 / math.log2(3))
    for metric in (ndcg, reciprocal_rank, average_precision, recall):
        assert metric(["a", "b"], {"a": 0}, 10) == 0.0


def test_means_count_all_zero_queries_and_skip_unjudged_ones():
    run = {"q1": {"a": 1.0}, "q2": {"a": 1.0}, "unjudged": {"a": 1.0}}
    qrels = {"q1": {"a": 1}, "q2": {"a": 0}}
    assert ndcg_at_k(run, qrels) == mrr_at_k(run, qrels) == map_at_k(run, qrels) == 0.5
    assert recall_at_k(run, qrels, 1) == 0.5
    assert retrieval_scores(run, qrels)["n_queries"] == 2


# ---- equality with trec_eval -------------------------------------------------------------------
def random_case(seed: int) -> tuple[dict, dict]:
    """A run with many exact score ties and qrels with grades -1..3, relevant passages that are
    not retrieved, queries judged all 0, queries with no judgement and judged queries not run."""
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(300)] + ["D", "d", "10", "9", "é"]  # ids that sort oddly
    run, qrels = {}, {}
    for q in range(40):
        qid = f"q{q}"
        retrieved = rng.sample(docs, rng.randint(1, 150))
        levels = [round(rng.random(), 1) for _ in range(5)]  # 5 scores only: ties everywhere
        run[qid] = {d: rng.choice(levels) for d in retrieved}
        if q % 10 == 9:
            continue  # a query that is run but not judged
        judged = rng.sample(docs, rng.randint(1, 30))
        grades = [0] * 4 if q % 10 == 8 else [-1, 0, 1, 1, 2, 3]  # q%10 == 8: all zero
        qrels[qid] = {d: rng.choice(grades) for d in judged}
    qrels["only_judged"] = {"d1": 1}  # judged but absent from the run
    return run, qrels


def top(run: dict, k: int) -> dict:
    return {q: {d: s[d] for d in trec_order(s)[:k]} for q, s in run.items()}


def naive_sum(values) -> float:
    """BEIR's averaging of pytrec_eval's values: `+=` in a loop (not Python 3.12's compensated
    `sum`)."""
    return functools.reduce(operator.add, values, 0.0)


def test_floats_are_added_left_to_right_as_trec_eval_adds_them():
    """On Python 3.12+ `sum` compensates rounding and then differs from trec_eval's C loops in
    the last bit (one nDCG of the case below did): the metrics add as C does, on every Python."""
    assert added_up([1e16, 1.0, -1e16]) == 0.0 == (1e16 + 1.0) - 1e16
    assert added_up([]) == 0.0 and added_up(iter([0.5, 0.25])) == 0.75


@pytest.mark.parametrize("seed", range(5))
def test_metrics_equal_pytrec_eval_exactly(seed):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    run, qrels = random_case(seed)
    measures = {"ndcg_cut.10", "map_cut.100", "recall.1", "recall.10", "recall.100"}
    theirs = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    mrr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(top(run, 10))
    assert set(theirs) == {q for q in run if q in qrels}
    for qid, values in theirs.items():
        ranked = trec_order(run[qid])
        for measure, (metric, k) in TREC_MEASURES.items():
            assert metric(ranked, qrels[qid], k) == values[measure], (qid, measure)
        assert reciprocal_rank(ranked, qrels[qid], 10) == mrr[qid]["recip_rank"], qid
    ours = retrieval_scores(run, qrels)
    n = len(theirs)
    assert ours["ndcg@10"] == naive_sum(v["ndcg_cut_10"] for v in theirs.values()) / n
    assert ours["map@100"] == naive_sum(v["map_cut_100"] for v in theirs.values()) / n
    assert ours["recall@10"] == naive_sum(v["recall_10"] for v in theirs.values()) / n
    assert ours["mrr@10"] == naive_sum(v["recip_rank"] for v in mrr.values()) / n


# ---- bounded exact search ------------------------------------------------------------------------
@pytest.mark.parametrize(("chunk", "batch"), [(7, 3), (50, 100), (1000, 1)])
def test_running_top_k_equals_a_full_sort(chunk, batch):
    gen = torch.Generator().manual_seed(0)
    queries = torch.nn.functional.normalize(torch.randn(20, 8, generator=gen), dim=1)
    corpus = torch.nn.functional.normalize(torch.randn(333, 8, generator=gen), dim=1)
    top_k = RunningTopK(queries, k=25, query_batch=batch)
    for start in range(0, len(corpus), chunk):
        top_k.add(corpus[start : start + chunk])
    scores, rows = top_k.result()
    full = (queries @ corpus.T).topk(25, dim=1)
    np.testing.assert_array_equal(rows, full.indices.numpy())
    np.testing.assert_allclose(scores, full.values.numpy(), rtol=0, atol=1e-6)


def test_running_top_k_returns_every_row_of_a_small_corpus():
    top_k = RunningTopK(np.eye(3, dtype=np.float32), k=100)
    top_k.add(np.eye(3, dtype=np.float32))
    scores, rows = top_k.result()
    assert scores.shape == rows.shape == (3, 3)
    assert rows[:, 0].tolist() == [0, 1, 2]


# ---- the evaluator on a folder -----------------------------------------------------------------
SENTENCES = [
    "a man plays a guitar on the stage",
    "a woman slices an onion in the kitchen",
    "two dogs run through a snowy field",
    "the stock market fell sharply on monday",
    "a child reads a book under a tree",
    "the chef is cooking pasta for dinner",
    "a cat sleeps on a warm windowsill",
    "rain is expected across the north tomorrow",
    "the team won the final in extra time",
    "a boy rides his bike down the hill",
    "scientists discover water on a distant planet",
    "the train to london was delayed by snow",
]
QUERIES = {
    "q1": "someone is playing music",
    "q2": "cutting vegetables",
    "q3": "animals outside in winter",
    "q4": "finance news",
    "q5": "weather forecast",
    "q6": "sports result",
}
QRELS = {
    "q1": {"d0": 1},
    "q2": {"d1": 2, "d5": 1},
    "q3": {"d2": 1, "d6": 0},
    "q4": {"d3": 1},
    "q5": {"d7": 1, "d11": 1},
    "q6": {"d8": 1, "d9": 0},
}


@pytest.fixture
def beir_folder(tmp_path):
    corpus = {f"d{i}": s for i, s in enumerate(SENTENCES)}
    return write_beir(tmp_path / "beir", corpus, QUERIES, QRELS, "test")


def test_evaluator_scores_are_pytrec_evals_and_do_not_depend_on_chunks(beir_folder, tiny_encoder):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    encoder = tiny_encoder("mean")
    evaluator = RetrievalEvaluator(beir_folder, corpus_chunk=5, query_batch=2)
    run = evaluator.run(encoder.encode)
    assert all(len(docs) == len(SENTENCES) for docs in run.values())  # fewer than 100 passages
    whole = RetrievalEvaluator(beir_folder, corpus_chunk=1000).run(encoder.encode)
    assert {q: trec_order(d) for q, d in run.items()} == {
        q: trec_order(d) for q, d in whole.items()
    }
    scores = evaluator(encoder.encode)
    assert set(METRICS) <= set(scores)
    theirs = pytrec_eval.RelevanceEvaluator(QRELS, {"ndcg_cut.10", "map_cut.100"}).evaluate(run)
    assert scores["ndcg@10"] == sum(v["ndcg_cut_10"] for v in theirs.values()) / len(QRELS)
    assert scores["map@100"] == sum(v["map_cut_100"] for v in theirs.values()) / len(QRELS)
    assert scores["n_queries"] == len(QUERIES) and scores["n_passages"] == len(SENTENCES)


def test_ndcg_equals_sentence_transformers_information_retrieval_evaluator(
    beir_folder, tiny_encoder, tmp_path
):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.evaluation import InformationRetrievalEvaluator

    from dclr.data.beir import load_beir
    from dclr.models.encoder import SentenceEncoder
    from dclr.models.export import save_encoder

    path = save_encoder(tiny_encoder("mean"), tmp_path / "model")
    binary = {  # sentence-transformers judges sets of relevant ids, so grades become 1
        q: {d: 1 for d, g in docs.items() if g > 0} for q, docs in QRELS.items()
    }
    binary_folder = write_beir(
        tmp_path / "binary", {f"d{i}": s for i, s in enumerate(SENTENCES)}, QUERIES, binary, "test"
    )
    data = load_beir(binary_folder)
    st_eval = InformationRetrievalEvaluator(
        queries=dict(zip(data.query_ids, data.queries, strict=True)),
        corpus=dict(zip(data.corpus_ids, data.passages, strict=True)),
        relevant_docs={q: set(docs) for q, docs in data.qrels.items()},
        write_csv=False,
    )
    theirs = st_eval(SentenceTransformer(str(path), device="cpu"))
    ours = RetrievalEvaluator(binary_folder)(SentenceEncoder.from_pretrained(path).encode)
    assert 0 < ours["ndcg@10"] < 1  # a real ranking, neither empty nor perfect
    assert abs(ours["ndcg@10"] - theirs["cosine_ndcg@10"]) < ST_TOLERANCE
    assert abs(ours["mrr@10"] - theirs["cosine_mrr@10"]) < ST_TOLERANCE


# ---- a built index -----------------------------------------------------------------------------
def test_index_of_the_corpus_scores_as_exact_search(beir_folder, tiny_encoder, tmp_path):
    pytest.importorskip("faiss")
    from dclr.data.readers import open_source
    from dclr.indexing.index import IndexParams, build_index
    from dclr.models.encoder import SentenceEncoder
    from dclr.models.export import save_encoder

    model = save_encoder(tiny_encoder("mean"), tmp_path / "model")
    source = open_source(beir_folder / "corpus.jsonl", "text")
    build_index(str(model), source, tmp_path / "index", IndexParams("flat"))
    encoder = SentenceEncoder.from_pretrained(model)
    served = evaluate_index(tmp_path / "index", beir_folder, encoder.encode)
    exact = RetrievalEvaluator(beir_folder)(encoder.encode)
    for name in METRICS:
        assert served[name] == pytest.approx(exact[name], abs=1e-12), name


def test_index_of_another_corpus_is_refused(beir_folder, tiny_encoder, tmp_path):
    pytest.importorskip("faiss")
    from dclr.data.readers import open_source
    from dclr.errors import InputError
    from dclr.indexing.index import IndexParams, build_index
    from dclr.models.encoder import SentenceEncoder
    from dclr.models.export import save_encoder

    model = save_encoder(tiny_encoder("mean"), tmp_path / "model")
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"_id": str(i), "text": s}) + "\n" for i, s in enumerate(SENTENCES[::-1])))  # fmt: skip
    build_index(str(model), open_source(other, "text"), tmp_path / "index", IndexParams("flat"))
    encode = SentenceEncoder.from_pretrained(model).encode
    with pytest.raises(InputError, match="built from another corpus"):
        evaluate_index(tmp_path / "index", beir_folder, encode)


# ---- the command line and the Python API -------------------------------------------------------
def test_dclr_eval_retrieval_and_index_write_the_json(beir_folder, tiny_encoder, tmp_path):
    pytest.importorskip("faiss")
    from typer.testing import CliRunner

    import dclr
    from dclr.cli.main import app
    from dclr.models.export import save_encoder

    runner = CliRunner()
    model = str(save_encoder(tiny_encoder("mean"), tmp_path / "model"))
    exact = runner.invoke(
        app, ["eval", model, "--retrieval", str(beir_folder), "--json", str(tmp_path / "e.json")]
    )
    assert exact.exit_code == 0, exact.output
    assert "ndcg@10" in exact.output and "Spearman" not in exact.output  # retrieval only
    results = json.loads((tmp_path / "e.json").read_text())
    assert (
        results["retrieval/beir/ndcg@10"] == dclr.evaluate_retrieval(model, beir_folder)["ndcg@10"]
    )
    built = runner.invoke(
        app,
        ["index", "build", model, str(beir_folder / "corpus.jsonl"), "--column", "text",
         "--out", str(tmp_path / "index"), "--kind", "flat"],
    )  # fmt: skip
    assert built.exit_code == 0, built.output
    served = runner.invoke(
        app,
        ["eval", model, "--retrieval", str(beir_folder), "--index", str(tmp_path / "index"),
         "--json", str(tmp_path / "i.json")],
    )  # fmt: skip
    assert served.exit_code == 0, served.output
    assert json.loads((tmp_path / "i.json").read_text())["retrieval/beir/ndcg@10"] == (
        pytest.approx(results["retrieval/beir/ndcg@10"], abs=1e-12)
    )
    int8 = runner.invoke(
        app,
        ["index", "build", model, str(beir_folder / "corpus.jsonl"), "--column", "text",
         "--out", str(tmp_path / "int8"), "--kind", "flat", "--precision", "int8"],
    )  # fmt: skip
    assert int8.exit_code == 0, int8.output
    served8 = runner.invoke(  # the index's precision is the default: no --precision needed
        app, ["eval", model, "--retrieval", str(beir_folder), "--index", str(tmp_path / "int8")]
    )
    assert served8.exit_code == 0, served8.output
    other = save_encoder(tiny_encoder("cls_before_pooler"), tmp_path / "other")
    refused = runner.invoke(
        app,
        ["eval", str(other), "--retrieval", str(beir_folder), "--index", str(tmp_path / "index")],
    )
    assert refused.exit_code != 0 and "not comparable" in refused.output


def test_dclr_data_build_retrieval_writes_a_folder_eval_reads(data_dir, tmp_path):
    from typer.testing import CliRunner

    from dclr.cli.main import app
    from dclr.data.beir import load_beir

    done = CliRunner().invoke(
        app, ["data", "build-retrieval", str(tmp_path / "inli"), "--task", "inli", "--split", "dev",
              "--data-dir", str(data_dir)],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert len(load_beir(tmp_path / "inli", "dev").query_ids) == 1000
    import dclr  # `dclr.build_retrieval` is the command: the same files, the counts it printed

    built = dclr.build_retrieval(tmp_path / "py", "inli", "dev", data_dir)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/dev.tsv"):
        assert (tmp_path / "py" / name).read_bytes() == (tmp_path / "inli" / name).read_bytes()
    said = f"{built['passages']} passages, {built['queries']} queries, {built['judgements']} judg"
    assert built["queries"] == 1000 and said in " ".join(done.output.split())
    bad = CliRunner().invoke(app, ["eval", "m", "--index", str(tmp_path)])
    assert bad.exit_code != 0 and "--index needs --retrieval" in bad.output
