"""Fault injection on run folders: two runs at once, a new run into a finished one, stale state.

Before issue 13: two `dclr train -o SAME` mixed their outputs; training into a finished folder
overwrote best/, final/ and results.json; pruning by step number deleted the new run's checkpoint
at once, `latest` then named a missing folder, and `--resume` silently resumed the old run.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import torch
import yaml
from helpers import resumed_from, tiny_run_overrides
from typer.testing import CliRunner

from dclr.cli.main import app as cli_app
from dclr.driver import run_training
from dclr.errors import ConfigError
from dclr.recipe import load_config
from dclr.runlock import LOCK_FILE, FolderLock, LockHeld
from dclr.training.checkpoint import (
    checkpoint_dirs,
    latest_checkpoint,
    resume_checkpoint,
    save_checkpoint,
)
from dclr.training.runfolder import RUN_FILE, run_id
from dclr.training.tracking import read_metrics

overrides = tiny_run_overrides


def config(model_dir, corpus_file, out, **extra):
    return load_config(None, overrides(model_dir, corpus_file, out, **extra))


def test_finished_run_folder_is_refused_unless_resume_or_overwrite(
    model_dir, corpus_file, tmp_path
):
    run = tmp_path / "run"
    run_training(config(model_dir, corpus_file, run, max_steps=6, save_steps=3))
    first_id = run_id(run)
    final = (run / "final" / "model.safetensors").read_bytes()

    with pytest.raises(ConfigError, match="already holds a finished run") as err:
        run_training(config(model_dir, corpus_file, run, max_steps=2, seed=7))
    assert "--resume" in str(err.value) and "--overwrite" in str(err.value)
    assert "overwrite=True" in str(err.value)  # the Python API's way too (issue 38 item 6)
    assert (run / "final" / "model.safetensors").read_bytes() == final, "nothing was touched"
    assert run_id(run) == first_id

    run_training(config(model_dir, corpus_file, run, max_steps=2, seed=7), overwrite=True)
    assert run_id(run) != first_id
    assert [p.name for p in checkpoint_dirs(run / "checkpoints")] == ["step-00000002"]
    assert latest_checkpoint(run / "checkpoints").name == "step-00000002"
    assert sorted(r["step"] for r in read_metrics(run, "train")) == [1, 2]
    assert json.loads((run / "results.json").read_text())["steps"] == 2


def test_interrupted_run_folder_needs_resume(model_dir, corpus_file, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(run / "checkpoints", 5, *_tiny_training_state(), {})
    with pytest.raises(ConfigError, match="interrupted run .checkpoint step-00000005"):
        run_training(config(model_dir, corpus_file, run, max_steps=2))


def test_resume_refuses_a_checkpoint_of_another_run(model_dir, corpus_file, tmp_path):
    run = tmp_path / "run"
    run_training(config(model_dir, corpus_file, run, max_steps=4, save_steps=2))
    record = json.loads((run / RUN_FILE).read_text())
    (run / RUN_FILE).write_text(json.dumps({**record, "run_id": "someone-else"}))
    with pytest.raises(ConfigError, match="refusing to resume another run"):
        run_training(config(model_dir, corpus_file, run, max_steps=6, save_steps=2), resume=True)


def _tiny_training_state():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return model, optimizer, scheduler


def test_pruning_never_deletes_the_new_checkpoint(tmp_path):
    root = tmp_path / "checkpoints"
    for step in (1000, 2000):  # an older, longer run's checkpoints
        save_checkpoint(root, step, *_tiny_training_state(), {}, keep=2)
    save_checkpoint(root, 10, *_tiny_training_state(), {}, keep=2)
    names = [p.name for p in checkpoint_dirs(root)]
    assert names == ["step-00000010"], "the abandoned higher steps go, the new one stays"
    assert (root / "latest").read_text() == "step-00000010"
    assert latest_checkpoint(root) == root / "step-00000010"
    save_checkpoint(root, 20, *_tiny_training_state(), {}, keep=2)
    save_checkpoint(root, 30, *_tiny_training_state(), {}, keep=2)
    assert [p.name for p in checkpoint_dirs(root)] == ["step-00000020", "step-00000030"]


def test_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from dclr.runlock import FolderLock; "
            f"FolderLock({str(tmp_path)!r}, 'dclr train').acquire(); print('locked', flush=True); "
            "time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        named = f"pid {holder.pid} on {re.escape(socket.gethostname())}, "  # pid and host
        with pytest.raises(LockHeld, match=named) as err:
            FolderLock(tmp_path, "dclr train").acquire()
        assert "dclr train" in str(err.value)
        # the holder's start time from its record (a lock file without one reads "started ?")
        assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d: ", str(err.value))
    finally:
        holder.kill()  # kill -9: no clean-up runs
        holder.wait()
    assert (tmp_path / LOCK_FILE).exists(), "a stale lock file is left behind"
    with FolderLock(tmp_path, "dclr train") as lock:  # ... and taken over at once
        assert lock.holder()["pid"] == os.getpid()
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.slow
def test_two_dclr_train_into_one_folder_the_second_refuses_at_once(
    model_dir, corpus_file, tmp_path
):
    run = tmp_path / "run"
    sets = [
        f"--set={k}={v}"
        for k, v in overrides(model_dir, corpus_file, run, max_steps=5000).items()
        if k != "output_dir"
    ]
    command = [sys.executable, "-m", "dclr", "train", *sets, "-o", str(run)]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    log = (tmp_path / "first.log").open("w+")
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 600  # a loaded 2-core machine takes minutes to start torch
        while not (run / "metrics.jsonl").is_file() or not (run / "metrics.jsonl").stat().st_size:
            assert first.poll() is None, (tmp_path / "first.log").read_text()
            assert time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.1)
        written = {p.name: p.stat().st_mtime_ns for p in run.iterdir() if p.is_file()}
        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 2
        message = " ".join(second.stderr.split())
        assert f"is in use by pid {first.pid}" in message and "dclr train" in message
        assert "Traceback" not in second.stderr
        for name in ("config.yaml", "env.json", "run.json"):  # the second run wrote nothing
            assert (run / name).stat().st_mtime_ns == written[name]
        assert first.poll() is None, "the first run is unaffected"
    finally:
        first.terminate()  # SIGTERM: checkpoint at the end of the step, then exit
        first.wait(timeout=900)  # exiting torch alone takes minutes on a starved CPU
        log.close()
    err = (tmp_path / "first.log").read_text()
    assert first.returncode == 2 and "checkpoint saved" in " ".join(err.split())
    assert latest_checkpoint(run / "checkpoints") is not None


def _simcse_run_to_edit(model_dir, corpus_file, run):
    """A SimCSE run stopped at step 3 with its checkpoint kept, and its config.yaml as a dict."""
    run_training(config(model_dir, corpus_file, run, max_steps=3, save_steps=3))
    assert json.loads((run / "results.json").read_text())["method"] == "simcse"
    return yaml.safe_load((run / "config.yaml").read_text())


def _train_records(run):
    return [(r["step"], sorted(k for k in r if k.startswith("loss"))) for r in
            read_metrics(run, "train")]  # fmt: skip


def test_resume_refuses_another_method_naming_the_difference(model_dir, corpus_file, tmp_path):
    """Issue 39 item 3: a SimCSE run's config.yaml edited to `method: dclr` without its
    `simcse:` section resumed the SimCSE checkpoint at step 3 and trained DCLR on steps 4-5, no
    warning: one run folder, two methods. The run's identity (method and section set, from
    the config every checkpoint saves) must not change on resume."""
    run = tmp_path / "run"
    saved = _simcse_run_to_edit(model_dir, corpus_file, run)
    before = _train_records(run)
    dclr = {"complementary_pooler": "mean", "complementary_mode": "on_the_fly"}  # trainable
    edited = {k: v for k, v in saved.items() if k != "simcse"} | {"method": "dclr", "dclr": dclr}
    (run / "config.yaml").write_text(yaml.safe_dump(edited, sort_keys=False))
    changed = load_config(run / "config.yaml", {"optimisation.max_steps": 5})
    with pytest.raises(ConfigError, match="method 'simcse' -> 'dclr'") as err:
        run_training(changed, resume=True)
    message = str(err.value)
    assert "section 'simcse' dropped" in message and "step-00000003" in message
    assert "fix:" in message and "method: simcse" in message
    assert _train_records(run) == before, "nothing was trained"
    # the check on the checkpoint that is loaded, under the early one
    with pytest.raises(ConfigError, match="method 'simcse' -> 'dclr'"):
        resume_checkpoint(run / "checkpoints", *_tiny_training_state(), config=changed.to_dict())


def test_resume_names_a_changed_method_before_its_sections_are_refused(
    model_dir, corpus_file, tmp_path
):
    """Issue 39 item 3: with the `simcse:` section left in, `method: dclr` was refused only
    incidentally (`unknown section`); now the message names the method change."""
    run = tmp_path / "run"
    saved = _simcse_run_to_edit(model_dir, corpus_file, run)
    (run / "config.yaml").write_text(yaml.safe_dump(saved | {"method": "dclr"}, sort_keys=False))
    result = CliRunner().invoke(cli_app, ["train", "--resume", str(run), "--max-steps", "5"])
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert "method 'simcse' -> 'dclr'" in message and "unknown section" not in message
    assert "Traceback" not in message


def test_resume_with_the_same_method_and_new_values_continues(model_dir, corpus_file, tmp_path):
    run = tmp_path / "run"
    _simcse_run_to_edit(model_dir, corpus_file, run)
    same = load_config(run / "config.yaml", {"optimisation.max_steps": 5})
    assert resumed_from(lambda: run_training(same, resume=True)) == "step-00000003 (step 3)"
    assert [step for step, _ in _train_records(run)] == [1, 2, 3, 4, 5]


def test_what_a_killed_export_left_is_removed_when_the_folder_is_claimed(
    model_dir, corpus_file, tmp_path
):
    """A process killed mid-export leaves `.final.PID.tmp/` (a whole model) and maybe
    `.best.PID.old/`; the next run of the folder (resume, overwrite or new) removes them under
    its lock, and leaves everything else."""
    from dclr.training.runfolder import claim

    run = tmp_path / "run"
    run.mkdir()
    (run / ".final.4242.tmp").mkdir()
    (run / ".final.4242.tmp" / "model.safetensors").write_bytes(b"\0" * 1024)
    (run / ".best.4242.old").mkdir()
    (run / ".metrics.jsonl.4242.tmp").write_text("{")
    (run / "notes.tmp").write_text("mine")  # not an atomic write's name: kept
    with claim(run, resume=False, overwrite=False):
        names = sorted(p.name for p in run.iterdir())
    assert ".final.4242.tmp" not in names and ".best.4242.old" not in names
    assert ".metrics.jsonl.4242.tmp" not in names and "notes.tmp" in names


def test_the_api_resumes_a_run_folder_as_dclr_train_resume_does(model_dir, corpus_file, tmp_path):
    """`dclr.train(resume=DIR)` is `dclr train --resume DIR`: DIR's config.yaml, writing to DIR
    even when the folder moved since (the config records the old path), the method checked
    first. It needed DIR/config.yaml as the config and then wrote where that recorded."""
    import dclr

    first = tmp_path / "run"
    _simcse_run_to_edit(model_dir, corpus_file, first)
    moved = tmp_path / "moved"
    first.rename(moved)
    summary: dict = {}
    resumed = resumed_from(
        lambda: summary.update(dclr.train(resume=moved, overrides={"optimisation.max_steps": 5}))
    )
    assert resumed == "step-00000003 (step 3)"  # a fresh 5-step run writes the same records
    assert [step for step, _ in _train_records(moved)] == [1, 2, 3, 4, 5]
    assert not first.exists() and summary["steps"] == 5
    with pytest.raises(ConfigError, match="leave config out"):
        dclr.train(moved / "config.yaml", resume=moved)
    with pytest.raises(ConfigError, match="no config.yaml there"):
        dclr.train(resume=tmp_path / "nothing")
    with pytest.raises(ConfigError, match="nothing to train"):
        dclr.train()
    from dclr.recipe import load_resumed

    elsewhere = str(tmp_path / "elsewhere")  # the flat spelling names another folder too
    assert load_resumed(moved, {"output_dir": elsewhere}).run.output_dir == elsewhere
    assert load_resumed(moved, {"run.output_dir": elsewhere}).run.output_dir == elsewhere
    assert load_resumed(moved).run.output_dir == str(moved)


def test_a_resume_with_another_number_of_ranks_says_dropout_is_drawn_anew(
    model_dir, corpus_file, tmp_path, monkeypatch
):
    """A checkpoint holds each rank's random stream; resumed by another number of processes
    there is none for this layout, so the streams are drawn anew and the run says so (it
    resumed silently). Checkpoints record the world size they were written by."""
    from dclr.progress import listening
    from dclr.training import loop

    run = tmp_path / "run"
    _simcse_run_to_edit(model_dir, corpus_file, run)
    state = json.loads((latest_checkpoint(run / "checkpoints") / "state.json").read_text())
    assert state["world_size"] == 1
    real = loop.resume_checkpoint

    def written_by_two(*args, **kwargs):
        path, saved = real(*args, **kwargs)
        return path, {**saved, "world_size": 2}

    monkeypatch.setattr(loop, "resume_checkpoint", written_by_two)
    heard: list[str] = []
    with listening(heard.append):
        run_training(load_config(run / "config.yaml", {"optimisation.max_steps": 5}), resume=True)
    assert any("written by 2 process(es), this run has 1: dropout is drawn anew" in h
               for h in heard), heard  # fmt: skip
