"""Checkpoints written in the background (`run.async_checkpoints`): the same files as the
synchronous path, on a thread, on disk before the loop reports them, and resumable."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from helpers import interrupt_on_call, nan_on_call, tiny_run_overrides

import dclr.losses.simcse as simcse_module
import dclr.training.loop as loop_module
from dclr.driver import trainer_for
from dclr.errors import TrainingDiverged
from dclr.recipe import load_config
from dclr.training.background import CheckpointWriter, available_memory
from dclr.training.checkpoint import (
    capture,
    checkpoint_bytes,
    host_copy,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    write_checkpoint,
)
from dclr.training.tracking import read_metrics


class Tied(torch.nn.Module):
    """Two names for one weight (as tied input/output embeddings are), and a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.out = torch.nn.Linear(6, 11, bias=False)
        self.out.weight = self.embed.weight
        self.proj = torch.nn.Linear(6, 6)
        self.register_buffer("scale", torch.tensor([2.0]))


def trained_state(seed: int = 0):
    torch.manual_seed(seed)
    model, head = Tied(), torch.nn.Linear(6, 3)
    groups = [{"params": model.parameters()}, {"params": head.parameters(), "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=1e-2)  # the groups share one `betas` tuple
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    for _ in range(2):
        hidden = model.proj(model.embed(torch.randint(0, 11, (4,))))
        (model.out(hidden).square().mean() + head(hidden).sum()).backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return model, head, optimizer, scheduler


def manifest(path: Path) -> dict[str, str]:
    files = json.loads((path / "manifest.json").read_text())["files"]
    return {name: record["sha256"] for name, record in files.items()}


def test_a_host_copy_writes_the_bytes_of_the_synchronous_path_after_training_moved_on(tmp_path):
    model, head, optimizer, scheduler = trained_state()
    torch.manual_seed(7)  # the RNG state both checkpoints save
    direct = save_checkpoint(tmp_path / "a", 2, model, optimizer, scheduler, {"k": 1},
                             extra={"head": head})  # fmt: skip
    torch.manual_seed(7)
    content = host_copy(capture(model, optimizer, scheduler, {"head": head}))
    with torch.no_grad():  # the live state changes before the copy is written
        for p in [*model.parameters(), *head.parameters()]:
            p.add_(1.0)
        for state in optimizer.state.values():
            state["exp_avg"].mul_(3.0)
    copied = write_checkpoint(tmp_path / "b", 2, content, {"k": 1})
    assert manifest(copied) == manifest(direct)
    # the tied weight is written once, under one name, and loads back into both
    restored, head2, optimizer2, scheduler2 = trained_state(seed=1)
    load_checkpoint(copied, restored, optimizer2, scheduler2, extra={"head": head2})
    assert restored.out.weight is restored.embed.weight
    torch.testing.assert_close(restored.embed.weight, model.embed.weight - 1.0)
    assert scheduler2.state_dict()["last_epoch"] == 2


def test_without_a_host_copy_the_content_is_the_live_tensors():
    model, head, optimizer, scheduler = trained_state()
    content = capture(model, optimizer, scheduler, {"head": head})
    assert content.model["proj.weight"].data_ptr() == model.proj.weight.data_ptr()
    assert content.bytes == checkpoint_bytes(model, optimizer, {"head": head})  # the disk guard's
    copied = host_copy(capture(model, optimizer, scheduler, {"head": head}))
    assert copied.model["proj.weight"].data_ptr() != model.proj.weight.data_ptr()
    # shared storage stays shared in the copy (safetensors then writes one name)
    assert copied.model["out.weight"].data_ptr() == copied.model["embed.weight"].data_ptr()


def test_the_writer_writes_on_its_thread_one_at_a_time_and_raises_a_write_error_on_wait(tmp_path):
    writer = CheckpointWriter(background=True)
    seen: list[tuple[str, int]] = []
    release = threading.Event()

    def write(n: int) -> Path:
        if n == 1:
            release.wait(5)
        seen.append((threading.current_thread().name, n))
        return tmp_path / str(n)

    writer.submit(lambda: write(1))
    assert seen == []  # submit returned while the first write waits
    release.set()
    writer.submit(lambda: write(2))  # waits for the first one: never two in flight
    assert seen[0][1] == 1
    assert writer.wait() == tmp_path / "2"
    assert all(name.startswith("dclr-checkpoint") for name, _ in seen)
    assert writer.times.summary()["written"] == 2

    def fail() -> Path:
        raise OSError("No space left on device")

    writer.submit(fail)
    with pytest.raises(OSError, match="No space left"):
        writer.wait()
    writer.submit(fail)
    with pytest.warns(UserWarning, match="in the background failed: No space left"):
        writer.close()  # called while another error stops the loop: warned, not raised


def test_the_synchronous_writer_writes_in_the_callers_thread():
    writer = CheckpointWriter(background=False)
    names: list[str] = []
    writer.submit(lambda: names.append(threading.current_thread().name) or Path("x"))
    assert names == [threading.current_thread().name]
    summary = writer.times.summary()
    assert summary["background"] is False and summary["written"] == 1


def train_losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir, "train")}


def config(model_dir, corpus_file, out, background: bool, **extra):
    mode = "on" if background else "off"
    options = {"max_steps": 12, "save_steps": 4, "async_checkpoints": mode, **extra}
    return load_config(None, tiny_run_overrides(model_dir, corpus_file, out, **options))


@pytest.fixture(scope="module")
def synchronous(model_dir, corpus_file, tmp_path_factory):
    """The reference run: checkpoints written in the loop."""
    out = tmp_path_factory.mktemp("sync") / "run"
    result = trainer_for(config(model_dir, corpus_file, out, background=False)).train()
    return out, result


def test_a_background_run_follows_the_trajectory_and_writes_the_same_checkpoints(
    model_dir, corpus_file, tmp_path, synchronous, monkeypatch
):
    reference, reference_result = synchronous
    threads: list[str] = []
    real = loop_module.write_checkpoint

    def slow_write(*args, **kwargs):  # slower than a step: the loop must not wait for it
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_module, "write_checkpoint", slow_write)
    out = tmp_path / "run"
    result = trainer_for(config(model_dir, corpus_file, out, background=True)).train()
    assert train_losses(out) == train_losses(reference)
    assert threads and all(name.startswith("dclr-checkpoint") for name in threads)
    for name in ("step-00000008", "step-00000012"):
        written = manifest(out / "checkpoints" / name)
        expected = manifest(reference / "checkpoints" / name)
        for file in ("model.safetensors", "trainer.pt"):
            assert written[file] == expected[file], (name, file)
    times = result.checkpoint_times
    assert times["background"] is True and times["written"] == 3
    assert times["write_seconds"] >= 0.9  # three slow writes, timed on the thread
    assert reference_result.checkpoint_times["background"] is False
    assert reference_result.checkpoint_times["written"] == 3


def test_an_interrupted_background_run_resumes_onto_the_same_trajectory(
    model_dir, corpus_file, tmp_path, synchronous, monkeypatch
):
    reference, _ = synchronous
    out = tmp_path / "run"
    real = simcse_module.simcse_loss
    monkeypatch.setattr(simcse_module, "simcse_loss", interrupt_on_call(real, 10))
    with pytest.raises(KeyboardInterrupt):
        trainer_for(config(model_dir, corpus_file, out, background=True)).train()
    monkeypatch.setattr(simcse_module, "simcse_loss", real)
    # the step-8 checkpoint, in flight or not when step 10 failed, is complete on disk
    assert latest_checkpoint(out / "checkpoints").name == "step-00000008"
    assert not list((out / "checkpoints").glob("*.tmp"))
    trainer_for(config(model_dir, corpus_file, out, background=True)).train(resume=True)
    assert train_losses(out) == train_losses(reference)


def test_a_nan_stop_names_a_background_checkpoint_that_is_on_disk(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    monkeypatch.setattr(simcse_module, "simcse_loss", nan_on_call(simcse_module.simcse_loss, 7))
    out = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="step 7") as err:
        trainer_for(config(model_dir, corpus_file, out, background=True, save_steps=3)).train()
    assert err.value.last_checkpoint.endswith("step-00000006")
    assert latest_checkpoint(out / "checkpoints").name == "step-00000006"


def test_the_driver_reports_what_checkpoints_cost(model_dir, corpus_file, tmp_path):
    from dclr.driver import run_training

    out = tmp_path / "run"
    summary = run_training(config(model_dir, corpus_file, out, background=True, max_steps=4,
                                  save_steps=2))  # fmt: skip
    times = summary["checkpoint_times"]
    assert times["background"] is True and times["written"] == 2
    assert times["capture_seconds"] > 0 and times["write_seconds"] > 0
    assert json.loads((out / "results.json").read_text())["checkpoint_times"] == times


def test_available_memory_is_linux_memavailable_and_none_when_unknown(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   1500000 kB\n")
    assert available_memory(meminfo) == 1_500_000 * 1024
    meminfo.write_text("MemTotal:       24000000 kB\n")
    assert available_memory(meminfo) is None
    assert available_memory(tmp_path / "missing") is None


def test_without_room_for_the_copy_checkpoints_are_written_in_the_loop_with_a_warning(
    model_dir, corpus_file, tmp_path, synchronous, monkeypatch
):
    reference, _ = synchronous
    threads: list[str] = []
    real = loop_module.write_checkpoint

    def recorded(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_module, "write_checkpoint", recorded)
    monkeypatch.setattr(loop_module, "room_for_copy", lambda needed: False)
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="host copy of the checkpoint needs") as said:
        trainer_for(config(model_dir, corpus_file, out, background=True)).train()
    assert sum("host copy" in str(w.message) for w in said) == 1  # said once, not per checkpoint
    assert len(threads) == 3
    assert train_losses(out) == train_losses(reference)
    written = manifest(out / "checkpoints" / "step-00000012")
    expected = manifest(reference / "checkpoints" / "step-00000012")
    assert written["model.safetensors"] == expected["model.safetensors"]
    assert written["trainer.pt"] == expected["trainer.pt"]


def test_the_run_summary_says_what_checkpoints_cost():
    from dclr.cli.main import checkpoint_line, out, render_summary

    times = {"background": True, "written": 3, "capture_seconds": 0.42, "write_seconds": 9.6}
    assert checkpoint_line(times) == (
        "3 checkpoints written in the background: 0.4 s of copies in the loop, 9.6 s of writes "
        "on a thread"
    )
    assert checkpoint_line({**times, "background": False, "written": 1}) == (
        "1 checkpoint written in the loop: 9.6 s"
    )
    assert checkpoint_line(None) is None and checkpoint_line({"written": 0}) is None
    with out.capture() as shown:
        render_summary({"phase_seconds": {"train_steps": 1.0, "total": 2.0},
                        "checkpoint_times": times})  # fmt: skip
    assert "0.4 s of copies in the loop" in shown.get()


def test_a_failed_background_write_stops_the_run_at_the_next_checkpoint(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """Disk full during step 8's write: the error is raised when the loop next waits for the
    writer (step 12's checkpoint), and step 4's checkpoint is still the one on disk."""
    real = loop_module.write_checkpoint
    calls = {"n": 0}

    def full_on_second(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(loop_module, "write_checkpoint", full_on_second)
    out = tmp_path / "run"
    with pytest.raises(OSError, match="No space left on device"):
        trainer_for(config(model_dir, corpus_file, out, background=True)).train()
    assert latest_checkpoint(out / "checkpoints").name == "step-00000004"
    assert calls["n"] == 2  # nothing written after the failure
    assert max(train_losses(out)) == 12  # the steps went on until the loop waited
    assert not (out / "final").exists()
