"""Checkpoints written on a thread while training goes on (`run.async_checkpoints`).

A checkpoint blocks the loop for as long as it takes to write: BERT-base's 1.3 GB (weights and
AdamW's two moments) took 2.0-4.6 s on a CPU machine's disk, most of it hashing the files for the
manifest and fsync. With a writer enabled the loop blocks only to take a host copy of the state
(`dclr.training.checkpoint.host_copy`) and hands the copy to one background thread,
which writes it exactly as the synchronous path does (the same bytes). One write is in flight at
a time: the next checkpoint first waits for the one before (so at most one extra copy of the state
is in host memory), and so does the end of training, a planned pause and a stop signal, so a
checkpoint the loop reports is on disk. A write's error is raised by the next `wait`. When the
host has not the memory for the copy (`room_for_copy`), that checkpoint is written in the loop,
as without a writer, with a warning.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# Memory the host copy may take: at most this share of what the system has available.
COPY_SHARE = 0.8


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes the system can give without swapping (Linux's MemAvailable); None elsewhere."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def room_for_copy(needed: int) -> bool:
    """Whether a host copy of `needed` bytes fits (unknown: assumed to)."""
    free = available_memory()
    return free is None or needed <= COPY_SHARE * free


@dataclass
class WriteTimes:
    """What the checkpoints of one `train` cost: the loop's own time to capture each, and each
    write's time (on the thread when writing in the background, else in the loop)."""

    background: bool
    capture_seconds: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)

    def summary(self) -> dict[str, float | int | bool]:
        """results.json's "checkpoint_times": counts and sums (seconds)."""
        return {
            "background": self.background,
            "written": len(self.write_seconds),
            "capture_seconds": round(sum(self.capture_seconds), 3),
            "write_seconds": round(sum(self.write_seconds), 3),
        }


class CheckpointWriter:
    """`submit(write)` runs `write()` (which writes a captured checkpoint and returns its folder)
    on a thread when `background`, else at once; `wait()` returns when it is on disk."""

    def __init__(self, background: bool) -> None:
        self.times = WriteTimes(background)
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="dclr-checkpoint")
            if background
            else None
        )
        self._pending: Future[Path] | None = None

    @property
    def background(self) -> bool:
        return self._pool is not None

    def submit(self, write: Callable[[], Path]) -> None:
        """Start writing (after the previous write finished: call `wait` before capturing)."""
        self.wait()
        if self._pool is None:
            self._timed(write)
            return
        self._pending = self._pool.submit(self._timed, write)

    def wait(self) -> Path | None:
        """Block until the write in flight is on disk; its folder (None: nothing in flight).
        Raises the write's own error."""
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else None

    def close(self) -> None:
        """Finish the write in flight and stop the thread. Called while another error stops the
        loop: a failing write is warned about, not raised over that error."""
        try:
            self.wait()
        except Exception as err:  # noqa: BLE001 - the loop's own error is the one to raise
            warnings.warn(f"a checkpoint written in the background failed: {err}", stacklevel=2)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    def _timed(self, write: Callable[[], Path]) -> Path:
        tic = time.perf_counter()
        path = write()
        self.times.write_seconds.append(time.perf_counter() - tic)
        return path
