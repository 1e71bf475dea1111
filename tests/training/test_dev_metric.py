"""`run.eval_metric`: which dev number picks best/, including the user's own retrieval folder."""

import pytest
from helpers import (
    make_tiny_model_dir,
    tiny_run_overrides,
    write_beir_folder,
    write_pseudo_corpus,
)

from dclr.errors import ConfigError
from dclr.methods.base import dev_metric, retrieval_dev_scores
from dclr.recipe import load_config
from dclr.training.tracking import read_metrics


def test_dev_metric_per_choice():
    results = {"STSBenchmark": 80.0, "SICKRelatedness": 70.0, "retrieval_ndcg@10": 41.5}
    assert dev_metric(results, "stsb") == 80.0
    assert dev_metric(results, "stsb_sick") == 75.0
    assert dev_metric(results, "retrieval") == 41.5


def test_retrieval_dev_scores_are_percentages_of_every_metric():
    scores = {"ndcg@10": 0.5, "mrr@10": 0.25, "map@100": 0.125, "recall@1": 0.0,
              "recall@10": 1.0, "recall@100": 1.0, "n_queries": 3.0}  # fmt: skip
    assert retrieval_dev_scores(scores) == {
        "retrieval_ndcg@10": 50.0, "retrieval_mrr@10": 25.0, "retrieval_map@100": 12.5,
        "retrieval_recall@1": 0.0, "retrieval_recall@10": 100.0, "retrieval_recall@100": 100.0,
    }  # fmt: skip


def test_retrieval_metric_needs_a_folder():
    with pytest.raises(ConfigError, match="run.eval_retrieval"):
        load_config(None, {"model": "m", "eval_metric": "retrieval"})


def test_best_is_chosen_by_the_dev_queries(tmp_path):
    """A tiny run evaluated on a BEIR dev folder only: every eval record holds the six metrics
    (x 100) and no STS key, `metric` is nDCG@10, and best/ is the step with the highest one."""
    model = make_tiny_model_dir(tmp_path / "model")
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 200)
    lines = corpus.read_text().splitlines()
    folder = tmp_path / "search"
    write_beir_folder(
        folder, lines[:40], lines[40:50], [(i, (7 * i) % 40) for i in range(10)], "dev"
    )
    options = {"max_steps": 6, "eval_steps": 2, "eval_metric": "retrieval",
               "eval_retrieval": str(folder)}  # fmt: skip
    out = tmp_path / "run"
    from dclr.driver import run_training

    summary = run_training(load_config(None, tiny_run_overrides(model, corpus, out, **options)))
    evals = read_metrics(out, "eval")
    assert [r["step"] for r in evals] == [2, 4, 6]
    for record in evals:
        assert "STSBenchmark" not in record
        assert record["metric"] == record["retrieval_ndcg@10"]
        assert 0 <= record["retrieval_recall@100"] <= 100
    best = max(evals, key=lambda r: r["metric"])  # the first of equal ones, as the loop keeps
    assert summary["best_step"] == best["step"]
    assert (out / "best" / "model.safetensors").is_file()


def test_dev_evaluation_takes_the_run_s_sts_text_and_released_geometry(tmp_path, data_dir):
    """run.sts_text and run.released_geometry reach the dev evaluator: the *_released keys are
    logged beside the whole-set ones; a text form that does not exist is refused."""
    pytest.importorskip("sacremoses")
    from dclr.methods.base import sts_dev_evaluator
    from dclr.models.encoder import SentenceEncoder

    model = make_tiny_model_dir(tmp_path / "model")
    options = {"model": str(model), "data_dir": str(data_dir)}
    encoder = SentenceEncoder.from_pretrained(model, pooler="mean")
    plain = sts_dev_evaluator(load_config(None, options))(encoder)
    config = load_config(
        None, {**options, "run.sts_text": "senteval", "run.released_geometry": True}
    )
    both = sts_dev_evaluator(config)(encoder)
    assert "uniformity_released" not in plain
    assert {"alignment_released", "uniformity_released"} <= set(both)
    assert both["uniformity"] != both["uniformity_released"]  # two estimators, named apart
    assert both["STSBenchmark"] != plain["STSBenchmark"]  # another text, another score
    with pytest.raises(ConfigError, match="senteval"):
        load_config(None, {**options, "run.sts_text": "lower"})
