"""The main job's shared start pass: one forward gives the complementary cache (bit for bit what
the cache alone would hold) and the before-eval (the separate evaluation's scores up to rounding);
phase times land in results.json."""

from __future__ import annotations

import pytest
from helpers import make_tiny_model_dir

from dclr.data.sts import STS_TASKS
from dclr.evaluation.scores import evaluate_model
from dclr.losses.complementary import CachedComplementary
from dclr.methods.dclr import DCLR_METHOD
from dclr.methods.dclr_start import shared_start_scores
from dclr.models.encoder import SentenceEncoder
from dclr.recipe import load_config
from dclr.training.phases import PhaseTimes, breakdown, phase
from dclr.training.prepare import prepare_run

pytestmark = pytest.mark.slow


def test_shared_pass_equals_the_separate_cache_and_eval(tmp_path, monkeypatch, data_dir):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # empty starting-scores cache
    model = str(make_tiny_model_dir(tmp_path / "model", dropout=0.0))
    overrides = {
        "method": "dclr",
        "model.name": model,
        "model.pooler": "cls",
        "model.mlp_head": True,
        "model.max_length": 32,
        "data.corpus": "sts",
        "data.data_dir": str(data_dir),
        "dclr.complementary_pooler": "mean",
        "dclr.complementary_cache": str(tmp_path / "shared.npy"),
        "run.output_dir": str(tmp_path / "run"),
    }
    run = prepare_run(load_config(None, overrides), DCLR_METHOD)
    scores = shared_start_scores(run, "cls_before_pooler")
    assert scores is not None
    alone = SentenceEncoder.from_pretrained(model, pooler="mean")
    CachedComplementary.build_or_load(
        tmp_path / "alone.npy", alone, run.data, model, 32, show_progress=False
    )
    assert (tmp_path / "shared.npy").read_bytes() == (tmp_path / "alone.npy").read_bytes()
    separate = evaluate_model(model, "cls_before_pooler", str(data_dir))
    for task in (*STS_TASKS, "avg"):
        assert scores[task] == pytest.approx(separate[task], abs=0.01), task
    assert shared_start_scores(run, "cls_before_pooler") is None  # now known: not redone
    other = load_config(None, {**overrides, "dclr.complementary_model": str(tmp_path)})
    assert shared_start_scores(prepare_run(other, DCLR_METHOD), "cls_before_pooler") is None


def test_phase_times_add_up():
    times = PhaseTimes()
    with times.active(), phase("train"):
        for _ in range(2):  # a phase entered twice adds up
            with phase("dev_eval"):
                pass
    with phase("after_eval"):  # no active timer: not recorded
        pass
    table = breakdown(times, total=1.0)
    assert "after_eval" not in times.seconds and table["total"] == 1.0
    assert set(table) >= {"before_eval", "complementary_cache", "train_steps", "dev_eval"}


def test_phi_calibration_is_a_phase_of_its_own():
    """Issue 47 point 9: the calibration was counted under "checkpoints export"."""
    times = PhaseTimes()
    times.add("train", 10.0)
    times.add("phi_calibration", 4.0)  # inside "train", like the complementary cache
    times.add("complementary_cache", 1.0)
    times.add("train_steps", 3.0)  # the loop records this process's steps
    times.add("checkpoints", 0.5)  # the loop's checkpoint writes
    table = breakdown(times, total=12.0)
    assert table["phi_calibration"] == 4.0
    assert table["checkpoints"] == 0.5
    assert table["exports"] == 1.5  # 10 - 4 - 1 - 3 - 0.5


def test_the_main_job_end_to_end_writes_scores_cards_and_phase_times(
    tmp_path, monkeypatch, data_dir
):
    """`dclr train` as the README's main job runs it (DCLR, before/after test evaluation, the
    shared start pass, cards, a finished run dropping its checkpoints), on a tiny model."""
    from dclr.driver import run_training

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = str(make_tiny_model_dir(tmp_path / "model", dropout=0.1))
    out = tmp_path / "run"
    config = load_config(
        None,
        {
            "method": "dclr", "model.name": model, "model.max_length": 32,
            "data.corpus": "sts", "data.data_dir": str(data_dir),
            "optimisation.batch_size": 8, "optimisation.max_steps": 2,
            "run.eval_steps": 0, "run.output_dir": str(out), "run.test_eval": True,
            "run.keep_checkpoints_at_end": False,
            "dclr.complementary_pooler": "mean",
            "dclr.complementary_cache": str(tmp_path / "cache.npy"),
        },
    )  # fmt: skip
    summary = run_training(config)
    assert set(STS_TASKS) <= set(summary["before"]) and set(STS_TASKS) <= set(summary["after"])
    assert summary["phase_seconds"]["total"] > 0
    assert "| STS12 |" in (out / "best" / "README.md").read_text()  # the card's before/after
    assert not (out / "checkpoints").exists()
