"""The training loop: NaN stop, checkpoints, SIGKILL + resume reproduces the trajectory."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    interrupt_on_call,
    make_tiny_model_dir,
    nan_on_call,
    tiny_run_overrides,
    write_pseudo_corpus,
)

import dclr.losses.simcse as simcse_module
from dclr.driver import trainer_for
from dclr.errors import ConfigError, TrainingDiverged
from dclr.progress import listening
from dclr.recipe import load_config
from dclr.training.checkpoint import latest_checkpoint
from dclr.training.tracking import read_metrics


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    """400 deterministic pseudo-sentences, one per line, with a few blank lines to skip."""
    return write_pseudo_corpus(
        tmp_path_factory.mktemp("corpus") / "corpus.txt", 400, blank_every=97
    )


base_overrides = tiny_run_overrides


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}


def test_nan_loss_stops_and_keeps_last_good_checkpoint(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    monkeypatch.setattr(simcse_module, "simcse_loss", nan_on_call(simcse_module.simcse_loss, 7))
    config = load_config(
        None, base_overrides(model_dir, corpus_file, tmp_path / "run", max_steps=20, save_steps=3)
    )
    with pytest.raises(TrainingDiverged, match="step 7") as err:
        trainer_for(config).train()
    assert err.value.step == 7
    assert err.value.last_checkpoint is not None
    assert err.value.last_checkpoint.endswith("step-00000006")
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-00000006"
    assert not (tmp_path / "run" / "final").exists()
    steps = [r["step"] for r in read_metrics(tmp_path / "run", "train")]
    assert steps == list(range(1, 7))  # nothing logged for the NaN step


@pytest.mark.parametrize("extra", [{}, {"low_memory": True}], ids=["default", "low_memory"])
def test_in_process_resume_matches_uninterrupted(
    model_dir, corpus_file, tmp_path, monkeypatch, extra
):
    """low_memory: its fused AdamW's moments are checkpointed and resumed as the default's."""

    def config(out):
        return load_config(
            None, base_overrides(model_dir, corpus_file, out, max_steps=12, save_steps=4, **extra)
        )

    trainer_for(config(tmp_path / "a")).train()
    real = simcse_module.simcse_loss
    # an interruption at step 10, after the step-8 checkpoint
    monkeypatch.setattr(simcse_module, "simcse_loss", interrupt_on_call(real, 10))
    with pytest.raises(KeyboardInterrupt):
        trainer_for(config(tmp_path / "b")).train()
    monkeypatch.setattr(simcse_module, "simcse_loss", real)
    assert max(train_losses(tmp_path / "b")) == 9
    said: list[str] = []
    with listening(said.append):
        trainer_for(config(tmp_path / "b")).train(resume=True)
    assert train_losses(tmp_path / "a") == train_losses(tmp_path / "b")
    # issue 47: --resume says from which checkpoint and step it continues
    assert any("step-00000008" in s and "step 9 of 12" in s for s in said), said


def test_resume_after_sigkill_reproduces_the_loss_trajectory(model_dir, corpus_file, tmp_path):
    steps, kill_after = 300, 40
    sets = [
        f"--set={k}={v}"
        for k, v in base_overrides(
            model_dir, corpus_file, "unused", max_steps=steps, save_steps=5
        ).items()
        if k != "output_dir"
    ]
    cmd = [sys.executable, "-m", "dclr", "train", *sets]
    env = {**os.environ, "TQDM_DISABLE": "1"}

    subprocess.run(
        [*cmd, "-o", str(tmp_path / "full")], check=True, env=env, timeout=600, capture_output=True
    )
    reference = train_losses(tmp_path / "full")
    assert len(reference) == steps

    run = tmp_path / "killed"
    proc = subprocess.Popen(
        [*cmd, "-o", str(run)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if (run / "metrics.jsonl").exists() and len(train_losses_safe(run)) >= kill_after:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not (run / "final").exists()
    killed_at = max(train_losses_safe(run))
    assert killed_at < steps

    subprocess.run(
        [sys.executable, "-m", "dclr", "train", "--resume", str(run)],
        check=True,
        env=env,
        timeout=600,
        capture_output=True,
    )
    resumed = train_losses(run)
    assert sorted(resumed) == list(range(1, steps + 1))
    assert resumed == reference  # bit-identical trajectory, dropout included
    saved = json.loads((run / "results.json").read_text())
    assert saved["steps"] == steps


def train_losses_safe(run: Path) -> dict[int, float]:
    """Metrics of a run being written: ignore a half-written last line."""
    out = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("kind") == "train":
            out[row["step"]] = row["loss"]
    return out


def test_grad_cache_training_follows_the_uncached_trajectory(tmp_path, corpus_file):
    model = make_tiny_model_dir(tmp_path / "m", dropout=0.0)
    plain = load_config(None, base_overrides(model, corpus_file, tmp_path / "a", max_steps=5))
    cached = load_config(
        None, base_overrides(model, corpus_file, tmp_path / "b", max_steps=5, grad_cache_chunk=3)
    )
    trainer_for(plain).train()
    trainer_for(cached).train()
    a, b = train_losses(tmp_path / "a"), train_losses(tmp_path / "b")
    assert a.keys() == b.keys()
    for step in a:
        assert b[step] == pytest.approx(a[step], abs=1e-5)


def test_a_finished_run_can_drop_its_checkpoints(model_dir, corpus_file, tmp_path):
    from dclr.driver import run_training

    options = {"max_steps": 4, "save_steps": 2, "keep_checkpoints_at_end": False}
    out = tmp_path / "run"
    run_training(load_config(None, tiny_run_overrides(model_dir, corpus_file, out, **options)))
    assert not (out / "checkpoints").exists() and not (out / "checkpoints.deleting").exists()
    assert (out / "final" / "model.safetensors").is_file() and (out / "results.json").is_file()
    kept = tmp_path / "kept"
    options["keep_checkpoints_at_end"] = True
    run_training(load_config(None, tiny_run_overrides(model_dir, corpus_file, kept, **options)))
    assert (kept / "checkpoints").is_dir()


def test_save_steps_0_writes_no_checkpoint_but_a_pause_or_a_stop_still_does(
    model_dir, corpus_file, tmp_path
):
    """`save_steps: 0` (timing runs): no periodic checkpoint and none after the last step, while
    final/ is exported; a planned pause (`stop_at_step`) still leaves one to resume from."""
    from dclr.training.phases import PhaseTimes

    out = tmp_path / "run"
    times = PhaseTimes()
    with times.active():
        trainer_for(load_config(None, base_overrides(model_dir, corpus_file, out, max_steps=4,
                                                     save_steps=0))).train()  # fmt: skip
    assert latest_checkpoint(out / "checkpoints") is None
    assert (out / "final" / "model.safetensors").is_file()
    assert "checkpoints" not in times.seconds  # the phase is timed only when one is written
    config = load_config(None, base_overrides(model_dir, corpus_file, out, max_steps=4,
                                              save_steps=0))  # fmt: skip
    with pytest.raises(ConfigError, match=r"no checkpoint under .*save_steps 0.*\n  fix: "):
        trainer_for(config).train(resume=True)
    paused = tmp_path / "paused"
    with times.active():
        trainer_for(load_config(None, base_overrides(model_dir, corpus_file, paused, max_steps=4,
                                                     save_steps=0))).train(stop_at_step=2)  # fmt: skip
    assert latest_checkpoint(paused / "checkpoints").name == "step-00000002"
    assert times.seconds["checkpoints"] > 0
    assert not (paused / "final").exists()


def test_the_checkpoint_rule_by_hand():
    """Every `every` steps, at a planned pause and after the last step; with 0 only at a pause."""
    from dclr.training.loop import checkpoint_due

    assert [d for d in range(1, 8) if checkpoint_due(d, 7, 7, 3)] == [3, 6, 7]
    assert [d for d in range(1, 6) if checkpoint_due(d, 5, 9, 3)] == [3, 5]  # a pause at 5
    assert [d for d in range(1, 8) if checkpoint_due(d, 7, 7, 0)] == []
    assert [d for d in range(1, 6) if checkpoint_due(d, 5, 9, 0)] == [5]


@pytest.mark.parametrize("warmup_ratio", [0.0, 0.25])
def test_the_learning_rate_warms_up_then_decays_linearly(model_dir, corpus_file, tmp_path,
                                                         warmup_ratio):  # fmt: skip
    """`warmup_ratio` (0 in every shipped recipe, as SimCSE's; no other test sets it): the rate
    logged after step s is lr * s / W while s < W = int(ratio * T), then lr * (T - s) / (T - W),
    by hand for T = 8 steps and lr 1e-4 (W = 0: 8.75e-5, 7.5e-5, ...; W = 2: 5e-5, 1e-4, ...)."""
    lr, total = 1e-4, 8
    out = tmp_path / "run"
    overrides = tiny_run_overrides(model_dir, corpus_file, out, max_steps=total,
                                   learning_rate=lr, warmup_ratio=warmup_ratio)  # fmt: skip
    trainer_for(load_config(None, overrides)).train()
    logged = {r["step"]: r["lr"] for r in read_metrics(out, "train")}
    warm = int(warmup_ratio * total)
    want = {s: lr * (s / warm if s < warm else (total - s) / (total - warm))
            for s in range(1, total + 1)}  # fmt: skip
    assert logged == pytest.approx(want, rel=1e-9, abs=1e-15)
    if warm:
        assert logged[1] < logged[2] == pytest.approx(lr)  # rises to the peak, then falls
