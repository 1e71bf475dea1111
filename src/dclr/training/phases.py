"""Wall time of a run's phases (before-eval, complementary cache, steps, dev evals, after-eval).

The driver activates a `PhaseTimes`; code deep in a method marks its own phase with
`with phase("complementary_cache"):` and it is recorded only while a timer is active (otherwise it
costs one `perf_counter` call). The summary (`results.json` "phase_seconds") is data; the command
line renders it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

_ACTIVE: ContextVar[PhaseTimes | None] = ContextVar("dclr_phase_times", default=None)


class PhaseTimes:
    """Seconds per named phase; a phase entered several times (dev evaluations) adds up."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    @contextlib.contextmanager
    def active(self) -> Iterator[PhaseTimes]:
        token = _ACTIVE.set(self)
        try:
            yield self
        finally:
            _ACTIVE.reset(token)


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block into the active `PhaseTimes` (if any)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        times = _ACTIVE.get()
        if times is not None:
            times.add(name, time.perf_counter() - start)


def record(name: str, seconds: float) -> None:
    """Add `seconds` measured elsewhere to phase `name` of the active `PhaseTimes` (if any)."""
    times = _ACTIVE.get()
    if times is not None:
        times.add(name, seconds)


def breakdown(times: PhaseTimes, total: float) -> dict[str, float]:
    """The run's phases in order, all of this process (a resumed run: since the resume).
    "train" (the whole `Trainer.train`) is split into the complementary cache, φ calibration,
    the steps ("train_steps", which the loop records: this process's steps, not the run's
    total that a checkpoint carries), dev evaluations, checkpoints and the rest ("exports": the
    final/ and best/ exports and the objective's other set-up). "shared_start_pass" is the one
    forward over the corpus that gave both the before-eval vectors and the complementary cache
    (`shared_start`)."""
    s = times.seconds
    train_steps = s.get("train_steps", 0.0)
    calibration = s.get("phi_calibration", 0.0)  # inside "train", before step 1
    inner = (s.get("complementary_cache", 0.0) + calibration + s.get("dev_eval", 0.0)
             + train_steps + s.get("checkpoints", 0.0))  # fmt: skip
    shared = s.get("shared_start", 0.0)  # inside before_eval: one pass for it and the cache
    table = {
        "setup": s.get("setup", 0.0),
        "before_eval": s.get("before_eval", 0.0) - shared,
        "shared_start_pass": shared,
        "complementary_cache": s.get("complementary_cache", 0.0),
        "phi_calibration": calibration,
        "train_steps": train_steps,
        "dev_eval": s.get("dev_eval", 0.0),
        "checkpoints": s.get("checkpoints", 0.0),
        "exports": max(s.get("train", 0.0) - inner, 0.0),
        "after_eval": s.get("after_eval", 0.0),
    }
    table["total"] = total
    return {k: round(v, 2) for k, v in table.items()}
