"""Who owns a run folder, what may be done to an existing one, and stopping a run cleanly.

- `claim(run_dir, resume, overwrite)` holds the folder's lock (`dclr.runlock`) for the whole run:
  a second `dclr train -o SAME` is refused at once with a message naming the holder. A folder that
  already holds a run (a checkpoint, `best/`, `final/` or `results.json`) is refused unless
  `--resume` (continue it) or `--overwrite` (delete that run's outputs, by name, and start over) is
  given, so a finished run is never overwritten silently and old checkpoints never mix with new
  ones. A fresh run writes `run.json` with a new run id; every checkpoint records it, and
  `--resume` refuses a checkpoint of another run, or one of another method or section set
  (`check_resume`, before anything loads: a run folder never mixes two methods).
- `GracefulStop` turns the first SIGTERM or Ctrl-C into a request the training loop honours at the
  end of the current step by writing a checkpoint there (so a run killed before its first
  `save_steps` still leaves something to resume); a second Ctrl-C interrupts at once. SIGKILL
  cannot be caught: a run killed with -9 resumes from its last periodic checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from dclr import atomic
from dclr.errors import ConfigError, DclrError
from dclr.runlock import FolderLock

RUN_FILE = "run.json"
# What a run writes into its folder: `--overwrite` deletes these names and nothing else.
RUN_OUTPUTS = (
    "checkpoints",
    "best",
    "final",
    "tensorboard",
    "stage-1",
    "stage-2",
    "results.json",
    "metrics.jsonl",
    "before.json",
    "env.json",
    "config.yaml",
    RUN_FILE,
)


class TrainingStopped(DclrError):
    """A stop signal arrived; the run saved a checkpoint at `step` and can be resumed."""

    def __init__(self, step: int, checkpoint: str, run_dir: str) -> None:
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(
            f"stopped by a signal after step {step}; checkpoint saved at {checkpoint}\n"
            f"  fix: continue with `dclr train --resume {run_dir}`"
        )


def previous_run(run_dir: Path) -> str | None:
    """What an earlier run left in `run_dir` that a new run would clobber, or None."""
    from dclr.training.checkpoint import checkpoint_dirs

    if (run_dir / "results.json").is_file() or (run_dir / "final").is_dir():
        return "a finished run (results.json / final/)"
    steps = checkpoint_dirs(run_dir / "checkpoints")
    if steps:
        return f"an interrupted run (checkpoint {steps[-1].name})"
    if (run_dir / "best").is_dir():
        return "an interrupted run (best/)"
    return None


def clear(run_dir: Path) -> None:
    """Delete a previous run's outputs (the names in RUN_OUTPUTS only)."""
    for name in RUN_OUTPUTS:
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()


def run_id(run_dir: Path) -> str | None:
    """The id of the run in `run_dir` (None for folders written before run ids existed)."""
    try:
        return json.loads((Path(run_dir) / RUN_FILE).read_text()).get("run_id")
    except (OSError, json.JSONDecodeError, AttributeError):
        return None


def check_resume(run_dir: Path, config: dict[str, Any], method_only: bool = False) -> None:
    """Refuse, before anything loads, to resume `run_dir` with `config` (`TrainConfig.to_dict()`
    form) when it changes the run identity of the folder's newest checkpoint
    (`checkpoint.check_identity`); `resume_checkpoint` checks the one it loads again.
    `method_only`: compare the method alone (`config` is a recipe not yet built, whose sections
    the method's defaults have not filled in)."""
    from dclr.training.checkpoint import STATE_FILE, check_identity, latest_checkpoint

    latest = latest_checkpoint(Path(run_dir) / "checkpoints")
    if latest is None:
        return
    try:
        state = json.loads((latest / STATE_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return  # damaged: resume_checkpoint names it and falls back to an older one
    if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
        return
    if method_only:
        state = {**state, "config": {"method": state["config"].get("method", "simcse")}}
        config = {"method": config.get("method", "simcse")}
    check_identity(latest, state, config)


@contextlib.contextmanager
def claim(run_dir: str | Path, resume: bool, overwrite: bool, main: bool = True) -> Iterator[None]:
    """Hold `run_dir` for a run (see the module docstring); only rank 0 (`main`) locks it."""
    run_dir = Path(run_dir)
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other: pick one")
    if not main:
        yield
        return
    created = not run_dir.exists()
    try:
        lock = FolderLock(run_dir, "dclr train").acquire()
    except OSError as err:
        raise atomic.named_os_error(err, run_dir) from err
    try:
        remove_leftovers(run_dir)  # under the lock: no other writer can own them
        if overwrite:
            clear(run_dir)
        elif not resume:
            found = previous_run(run_dir)
            if found:
                raise ConfigError(
                    f"{run_dir} already holds {found}\n"
                    f"  fix: `dclr train --resume {run_dir}` to continue it, --overwrite to "
                    "delete it and start over, or -o ANOTHER_FOLDER (Python: dclr.train(..., "
                    "resume=True) or overwrite=True, or another run.output_dir)"
                )
        if not resume or run_id(run_dir) is None:
            record = {
                "run_id": uuid.uuid4().hex,
                "started": time.time(),
                "host": socket.gethostname(),
                "command": " ".join(sys.argv),
            }
            atomic.write_text(run_dir / RUN_FILE, json.dumps(record, indent=2) + "\n")
        yield
    except BaseException:
        lock.release()
        if created:  # a run that failed before writing anything (a bad model id) leaves no folder
            remove_if_only_claimed(run_dir)
        raise
    else:
        lock.release()


# What `dclr.atomic` leaves when a process dies mid-write: `.NAME.PID.tmp` (a staged export or
# file) and `.NAME.PID.old` (the folder it was replacing, moved aside).
_LEFTOVER = re.compile(r"\.[^/]+\.\d+\.(tmp|old)")


def remove_leftovers(run_dir: Path) -> list[str]:
    """Delete what a killed process's atomic writes left in `run_dir` (a half-written `final/`
    of a 1 GB model is 1 GB): called by the lock's holder, so none is a live write. Returns the
    names removed."""
    removed: list[str] = []
    if not run_dir.is_dir():
        return removed
    for path in run_dir.iterdir():
        if _LEFTOVER.fullmatch(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def remove_if_only_claimed(run_dir: Path) -> None:
    """Delete `run_dir` if it holds nothing but the claim record (and no lock)."""
    if not run_dir.is_dir():
        return
    if {p.name for p in run_dir.iterdir()} <= {RUN_FILE}:
        shutil.rmtree(run_dir, ignore_errors=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM outside the training steps (`sigterm_as_interrupt`): it stops what runs as a
    Ctrl-C there does, and `dclr train` says what the run folder holds (exit 143)."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated` in a single-process run's main thread, so `timeout`,
    Slurm, systemd or `docker stop` during the caches, the calibration or the evaluations leave the
    message a Ctrl-C leaves instead of a silent exit; during the steps `GracefulStop` takes it
    first (a checkpoint, then the stop). Elsewhere (another thread, torchrun's ranks) SIGTERM
    keeps its usual effect."""
    single = int(os.environ.get("WORLD_SIZE", "1")) <= 1
    if not single or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class GracefulStop:
    """`with GracefulStop() as stop:` - `stop.requested` turns True on the first SIGTERM/SIGINT.

    Only the main thread can install signal handlers; elsewhere this does nothing and signals
    keep their usual effect. Under torchrun every rank takes the signal and the ranks agree on
    stopping (`Trainer._stop_agreed`); `speak` False keeps the other ranks' notice quiet.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, enabled: bool = True, speak: bool = True) -> None:
        self.enabled = enabled
        self.speak = speak
        self.requested = False
        self.signum: int | None = None  # the first signal taken
        self._previous: dict[int, Any] = {}
        self._restored: dict[int, Any] = {}  # the handlers `restore` put back

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.requested and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now, without a checkpoint
        if not self.requested:
            self.signum = signum
        self.requested = True
        if not self.speak:
            return
        print(
            f"\n{signal.Signals(signum).name}: stopping after this step (a checkpoint is saved); "
            "press Ctrl-C again to stop at once",
            file=sys.stderr,
            flush=True,
        )

    def install(self) -> GracefulStop:
        if not self.enabled:
            return self
        try:
            for sig in self.SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        except ValueError:  # not the main thread
            self.restore()
        return self

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._restored.update(self._previous)
        self._previous.clear()

    def pass_on(self) -> None:
        """A signal taken and not acted on (it came in the last step, so the run finished) goes to
        the handler in place before, when that is a caller's Python function (e.g.
        benchmarks/gpu_check.py's time limit, which would otherwise never hear of it). The
        default action, SIG_IGN and Python's own Ctrl-C handler are left alone: `dclr train`
        ends as before, its run complete."""
        handler = self._restored.get(self.signum) if self.signum is not None else None
        if callable(handler) and handler is not signal.default_int_handler:
            handler(self.signum, None)

    def __enter__(self) -> GracefulStop:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()


def rank_from_env() -> int:
    """This process's rank before the process group exists (torchrun sets RANK)."""
    return int(os.environ.get("RANK", "0"))


def interrupted_state(run_dir: str | Path) -> str:
    """What a run interrupted at once (a second Ctrl-C, or one outside the steps: the caches,
    the evaluations) left in `run_dir`, and how to go on: for the command line to say instead
    of exiting silently."""
    from dclr.training.checkpoint import checkpoint_dirs

    run_dir = Path(run_dir)
    resume = f"dclr train --resume {run_dir}"
    if (run_dir / "results.json").is_file():
        return f"interrupted at the very end; {run_dir / 'results.json'} is written"
    stages = sorted(p for p in run_dir.glob("stage-*") if p.is_dir())
    if stages:  # a schedule (`dclr.driver.run_stages`): it goes on from its root
        done = [p.name for p in stages if (p / "results.json").is_file()]
        stage = next((p.name for p in stages if p.name not in done), None)
        where = f"in {stage} of the schedule" if stage else f"after {done[-1]} of the schedule"
        kept = f" ({', '.join(done)} finished and kept)" if done else ""
        return f"interrupted {where}{kept}\n  fix: `{resume}` goes on from there"
    if (run_dir / "final").is_dir():
        return (
            f"interrupted after training, in the evaluation: the trained model is saved "
            f"({run_dir / 'best'}; the last step: {run_dir / 'final'}), but results.json and the "
            "card's before/after table are not written\n"
            f"  fix: `{resume}` evaluates it again without training a step, or "
            f"`dclr eval {run_dir / 'best'}`"
        )
    steps = checkpoint_dirs(run_dir / "checkpoints")
    if steps:
        return (
            f"interrupted; the newest checkpoint is {steps[-1]}\n"
            f"  fix: `{resume}` continues from it"
        )
    return (
        "interrupted before the first checkpoint: nothing to resume\n"
        "  fix: run the same command again"
    )
