"""The data report a run prints before training, and data.dedup (issue 27 item 7)."""

from __future__ import annotations

from helpers import make_tiny_model_dir, write_pseudo_corpus

from dclr.data.report import data_report, dedup_lines, describe
from dclr.driver import trainer_for
from dclr.recipe import load_config


def test_report_counts_blank_duplicates_and_truncation():
    lines = ["A cat.", "a  CAT.", "A dog runs", "one two three four five six"]
    report = data_report(lines, 2, lambda texts: [len(t.split()) + 2 for t in texts], 5)
    assert report["lines"] == 4 and report["blank_skipped"] == 2
    assert report["duplicates"] == 1 and report["duplicate_share"] == 0.25
    assert (report["truncated"], report["truncation_checked"]) == (1, 4)  # 6 words + 2 > 5
    text = describe(report)
    assert "4 lines" in text and "2 blank skipped" in text and "1 duplicates (25.0 %) kept" in text
    assert "1 cut at 5 tokens" in text
    big = data_report(lines * 10, 0, lambda texts: [1] * len(texts), 5, sample=8)
    assert big["truncation_checked"] == 8 and "of 8 sampled" in describe(big)


def test_truncation_is_counted_on_a_seeded_random_sample_not_the_first_lines():
    """A corpus whose first `sample` lines are short and the rest long: the first lines would
    report no truncation; a uniform sample reports about the long lines' share (3/4)."""
    sample = 400
    lines = [f"short {i}" for i in range(sample)] + [f"long {i} " + "w " * 9 for i in range(1200)]

    def truncated(seed: int) -> int:
        words = lambda texts: [len(t.split()) for t in texts]  # noqa: E731
        report = data_report(lines, 0, words, 5, sample=sample, seed=seed)
        assert report["truncation_checked"] == sample
        return report["truncated"]

    assert 0.65 * sample < truncated(3) < 0.85 * sample  # 3/4 expected, sd ~ 0.02 * sample
    assert truncated(3) == truncated(3)  # the same seed, the same sample
    assert len({truncated(seed) for seed in range(4)}) > 1  # the seed chooses the sample


def test_dedup_keeps_the_first_copy_in_order():
    assert dedup_lines(["b", "A", "a ", "B", "c"]) == ["b", "A", "c"]


def test_the_trainer_reports_its_corpus_and_dedups_it(tmp_path):
    model = make_tiny_model_dir(tmp_path / "model")
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 30, blank_every=10)
    lines = [x for x in corpus.read_text().splitlines() if x.strip()]
    corpus.write_text(corpus.read_text() + lines[0].upper() + "\n" + lines[1] + "\n")
    options = {"model.name": str(model), "model.pooler": "mean", "model.mlp_head": False,
               "data.corpus": str(corpus), "optimisation.batch_size": 4,
               "optimisation.max_steps": 1, "run.test_eval": False, "run.eval_steps": 0,
               "run.output_dir": str(tmp_path / "run")}  # fmt: skip
    kept = trainer_for(load_config(None, options)).run
    assert kept.data_report["duplicates"] == 2 and kept.data_report["blank_skipped"] > 0
    assert len(kept.data) == len(lines) + 2
    dropped = trainer_for(load_config(None, {**options, "data.dedup": True})).run
    assert len(dropped.data) == len(lines) and dropped.data_report["duplicates_dropped"] == 2
    assert dropped.data_report["duplicates"] == 0
