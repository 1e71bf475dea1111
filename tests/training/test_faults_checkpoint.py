"""Fault injection on checkpoints: a damaged newest checkpoint, a stop before the first save.

Before issue 13 a truncated `model.safetensors`, `trainer.pt` or `state.json` in the newest
checkpoint made `--resume` fail with a library traceback naming no file, and a run stopped before
its first `save_steps` left nothing to resume.
"""

import json
import os
import signal
import time

import pytest
import torch
from helpers import interrupt_on_call, resumed_from, tiny_run_overrides

import dclr.losses.simcse as simcse_module
from dclr.driver import trainer_for
from dclr.errors import ConfigError
from dclr.recipe import load_config
from dclr.training.checkpoint import (
    CorruptCheckpoint,
    CorruptCheckpointWarning,
    latest_checkpoint,
    resume_checkpoint,
    verify_checkpoint,
)
from dclr.training.runfolder import TrainingStopped
from dclr.training.tracking import read_metrics

STEPS, SAVE = 12, 4


def make_config(model_dir, corpus_file, out, **extra):
    options = {"max_steps": STEPS, "save_steps": SAVE, **extra}
    return load_config(None, tiny_run_overrides(model_dir, corpus_file, out, **options))


def losses(run_dir):
    return {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}


@pytest.fixture(scope="module")
def reference(model_dir, corpus_file, tmp_path_factory):
    """The uninterrupted run's loss per step."""
    run = tmp_path_factory.mktemp("reference") / "run"
    trainer_for(make_config(model_dir, corpus_file, run)).train()
    return losses(run)


def interrupted_run(model_dir, corpus_file, run, monkeypatch):
    """A run killed during step 10: checkpoints at steps 4 and 8 remain."""
    real = simcse_module.simcse_loss
    monkeypatch.setattr(simcse_module, "simcse_loss", interrupt_on_call(real, 10))
    with pytest.raises(KeyboardInterrupt):
        trainer_for(make_config(model_dir, corpus_file, run)).train()
    monkeypatch.setattr(simcse_module, "simcse_loss", real)
    assert latest_checkpoint(run / "checkpoints").name == "step-00000008"


@pytest.mark.parametrize("damaged", ["model.safetensors", "trainer.pt", "state.json"])
def test_truncated_newest_checkpoint_falls_back_to_the_intact_one(
    model_dir, corpus_file, reference, tmp_path, monkeypatch, damaged
):
    run = tmp_path / "run"
    interrupted_run(model_dir, corpus_file, run, monkeypatch)
    newest = run / "checkpoints" / "step-00000008"
    file = newest / damaged
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])  # a torn write
    assert damaged in verify_checkpoint(newest)

    real, trained = simcse_module.simcse_loss, []
    monkeypatch.setattr(simcse_module, "simcse_loss",
                        lambda *a, **k: trained.append(1) or real(*a, **k))  # fmt: skip
    with pytest.warns(CorruptCheckpointWarning, match=f"step-00000008/{damaged}"):
        trainer = trainer_for(make_config(model_dir, corpus_file, run))
        resumed = resumed_from(lambda: trainer.train(resume=True))
    # not started over (that trains the same deterministic losses): steps 5-12 only
    assert resumed == "step-00000004 (step 4)" and len(trained) == STEPS - 4
    assert losses(run) == reference  # from step 4 on, exactly the uninterrupted trajectory
    assert (run / "checkpoints" / "step-00000008.corrupt").is_dir()  # kept aside, never reused
    assert latest_checkpoint(run / "checkpoints").name == f"step-{STEPS:08d}"


def test_no_intact_checkpoint_names_every_bad_file(model_dir, corpus_file, tmp_path, monkeypatch):
    run = tmp_path / "run"
    interrupted_run(model_dir, corpus_file, run, monkeypatch)
    for step in (4, 8):
        (run / "checkpoints" / f"step-{step:08d}" / "trainer.pt").write_bytes(b"")
    with pytest.warns(CorruptCheckpointWarning), pytest.raises(CorruptCheckpoint) as err:
        trainer_for(make_config(model_dir, corpus_file, run)).train(resume=True)
    message = str(err.value)
    assert "step-00000004/trainer.pt" in message and "step-00000008/trainer.pt" in message
    assert "--overwrite" in message


def test_legacy_checkpoint_without_manifest_still_names_the_bad_file(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    interrupted_run(model_dir, corpus_file, run, monkeypatch)
    newest = run / "checkpoints" / "step-00000008"
    (newest / "manifest.json").unlink()  # as written by an older dclr
    data = (newest / "model.safetensors").read_bytes()
    (newest / "model.safetensors").write_bytes(data[: len(data) // 3])
    with pytest.warns(CorruptCheckpointWarning, match="step-00000008/model.safetensors"):
        trainer_for(make_config(model_dir, corpus_file, run)).train(resume=True)


def test_sigterm_before_the_first_save_leaves_a_resumable_checkpoint(
    model_dir, corpus_file, reference, tmp_path, monkeypatch
):
    """save_steps beyond max_steps: only a final checkpoint is planned. SIGTERM during step 6
    finishes that step, checkpoints it, and stops; --resume then reproduces the trajectory."""
    run = tmp_path / "run"
    config = make_config(model_dir, corpus_file, run, save_steps=1000)
    real, calls = simcse_module.simcse_loss, {"n": 0}

    def signalled(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 6:
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` or a scheduler's preemption
        return real(*args, **kwargs)

    monkeypatch.setattr(simcse_module, "simcse_loss", signalled)
    with pytest.raises(TrainingStopped) as err:
        trainer_for(config).train()
    monkeypatch.setattr(simcse_module, "simcse_loss", real)
    assert err.value.step == 6 and "--resume" in str(err.value)
    assert latest_checkpoint(run / "checkpoints").name == "step-00000006"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "the handler is removed"
    assert resumed_from(lambda: trainer_for(config).train(resume=True)) == "step-00000006 (step 6)"
    assert losses(run) == reference


class CallersStop(BaseException):
    """What a caller's own SIGTERM handler raises (benchmarks/gpu_check.py's time limit)."""


@pytest.mark.parametrize("caller", ["default", "python-handler"])
def test_a_signal_in_the_last_step_finishes_the_run_then_reaches_the_callers_handler(
    model_dir, corpus_file, tmp_path, monkeypatch, caller
):
    """SIGTERM in the last step: the run finishes (nothing is left to resume), and then the signal
    goes to the handler in place before the run. A caller's Python handler used to never hear
    of it, so a time-limited benchmark ran on past its limit; with the default action
    `dclr train` ends normally, as before."""
    run = tmp_path / "run"
    config = make_config(model_dir, corpus_file, run, max_steps=3, save_steps=1000)
    real, calls = simcse_module.simcse_loss, {"n": 0}

    def signalled(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # the last step
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    def handler(signum, frame):
        raise CallersStop

    monkeypatch.setattr(simcse_module, "simcse_loss", signalled)
    previous = signal.signal(
        signal.SIGTERM, handler if caller == "python-handler" else signal.SIG_DFL
    )
    try:
        if caller == "python-handler":
            with pytest.raises(CallersStop):
                trainer_for(config).train()
        else:
            assert trainer_for(config).train().final_dir == run / "final"
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (run / "final").is_dir() and latest_checkpoint(
        run / "checkpoints"
    ).name == "step-00000003"


def test_manifest_lists_size_and_checksum_of_every_file(model_dir, corpus_file, tmp_path):
    run = tmp_path / "run"
    trainer_for(make_config(model_dir, corpus_file, run, max_steps=2, save_steps=2)).train()
    checkpoint = run / "checkpoints" / "step-00000002"
    manifest = json.loads((checkpoint / "manifest.json").read_text())["files"]
    assert set(manifest) == {"model.safetensors", "trainer.pt", "state.json"}
    for name, record in manifest.items():
        assert record["bytes"] == (checkpoint / name).stat().st_size
        assert len(record["sha256"]) == 64
    assert verify_checkpoint(checkpoint) is None
    # A byte changed at the same size (a bit flip): the weights still load, so only the
    # checksum can tell, and resuming must not load them.
    weights = checkpoint / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the last byte of the last tensor
    weights.write_bytes(bytes(data))
    assert "model.safetensors: its sha256 differs" in str(verify_checkpoint(checkpoint))
    model = torch.nn.Linear(2, 2)  # never loaded: the checkpoint is refused before
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    with (
        pytest.warns(CorruptCheckpointWarning, match="model.safetensors: its sha256 differs"),
        pytest.raises(CorruptCheckpoint),
    ):
        resume_checkpoint(run / "checkpoints", model, optimizer, scheduler)


def test_the_phase_table_after_resume_counts_this_process_only(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """Issue 47 point 9: after `--resume` the table's "train steps" held every step's seconds
    since the run began (restored from the checkpoint) while its other phases and total count
    this process only, so the steps alone outgrew the total."""
    from dclr.driver import run_training

    run = tmp_path / "run"
    real = simcse_module.simcse_loss

    def slow(*args, **kwargs):  # steps 1-9 of the first process: 0.5 s each
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(simcse_module, "simcse_loss", interrupt_on_call(slow, 10))
    with pytest.raises(KeyboardInterrupt):
        run_training(make_config(model_dir, corpus_file, run))
    monkeypatch.setattr(simcse_module, "simcse_loss", real)

    summary = run_training(make_config(model_dir, corpus_file, run), resume=True)
    table = summary["phase_seconds"]
    assert summary["train_seconds"] >= 4.0  # the whole run's steps, as before
    assert table["train_steps"] < 4.0  # steps 9-12, run by this process
    parts = sum(seconds for name, seconds in table.items() if name != "total")
    assert parts <= table["total"] + 0.05


def test_a_changed_model_is_refused_and_the_intact_checkpoint_kept(
    model_dir, corpus_file, tmp_path
):
    """Resuming with overrides that change the model's shape (its MLP head dropped) is a config
    error naming the change: the checkpoint, verified against its manifest, is not renamed
    `.corrupt`, and the run resumes once the overrides are dropped."""
    run = tmp_path / "run"
    trainer_for(make_config(model_dir, corpus_file, run)).train(stop_at_step=SAVE)
    changed = make_config(model_dir, corpus_file, run, mlp_head=False)
    with pytest.raises(ConfigError, match="intact") as err:
        trainer_for(changed).train(resume=True)
    said = " ".join(str(err.value).split())
    assert "model.mlp_head True -> False" in said and "config.yaml" in said
    assert not isinstance(err.value, CorruptCheckpoint)
    assert [p.name for p in (run / "checkpoints").iterdir() if p.name.endswith(".corrupt")] == []
    trainer_for(make_config(model_dir, corpus_file, run)).train(resume=True)
    assert max(losses(run)) == STEPS


def test_only_a_shape_mismatch_is_blamed_on_the_config():
    """A verified checkpoint that fails to load for memory, disk or library reasons is not
    reported as "the config changed" (it is kept either way)."""
    from dclr.training.checkpoint import _shape_mismatch

    assert _shape_mismatch(RuntimeError("Error(s) in loading state_dict for M: Missing key(s)"))
    assert _shape_mismatch(ValueError("loaded state dict has a different number of groups"))
    assert not _shape_mismatch(RuntimeError("DefaultCPUAllocator: can't allocate memory"))
    assert not _shape_mismatch(OSError(5, "Input/output error"))
