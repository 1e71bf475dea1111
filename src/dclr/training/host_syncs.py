"""Where training makes the host wait for the device: each read of a device value, the step it
fell in and the line that made it (issue 44: "no host synchronisation in an ordinary step").

A GPU step is fast only while the host runs ahead, queueing kernels. A read of a device value
(`.item()`, `float()` or `bool()` of a tensor, `.cpu()`, `nonzero`, a boolean mask's index, a
blocking copy) makes the host wait until the device has caught up. `record_host_syncs(trainer)`
trains and records every such read:

- on a GPU, through CUDA's own detector (`torch.cuda.set_sync_debug_mode("warn")`: every
  synchronising CUDA call warns), on every thread;
- on a CPU nothing waits; the recorder catches the calls that would wait on a GPU, made on the
  calling thread (not the prefetch thread): a tensor read on the host (`HOST_READS`: `.item()`,
  `.tolist()`, `.numpy()`, `.cpu()`, `bool()`, `int()`, `float()`, as an index; a
  torch-function mode) and the aten calls whose output size depends on the data (`SYNC_OPS`, a
  boolean mask's index; a dispatch mode). It cannot tell a tensor that would be on the GPU from
  one that stays on the host (the sampler's ids, a mask drawn on the CPU), so a read of a host
  tensor counts too: for the code it sees, the CPU's count is an upper bound of the GPU's. It
  does not count `.to("cpu")`, which a CPU run cannot tell from `.to(device)`.

A step's reads run from the start of its `Trainer._step` to the start of the next: the step,
then its log, evaluation or checkpoint, and the next batch's preparation. An ordinary step is one
that neither logs, evaluates nor checkpoints; on a GPU it should make no read at all.
"""

from __future__ import annotations

import traceback
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

# Tensor methods that read a value on the host: on a GPU each waits for the device.
HOST_READS = frozenset({"item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__",
                        "__index__"})  # fmt: skip
# The aten calls that make the host wait on a GPU: a value read back (the aten side of the reads
# above, for calls that reach it otherwise), or an output whose size depends on the data (the
# host needs the count before it can go on).
SYNC_OPS = frozenset({"_local_scalar_dense", "nonzero", "masked_select", "_unique2",
                      "unique_consecutive", "unique_dim"})  # fmt: skip
CUDA_SYNC_MESSAGE = "synchronizing CUDA operation"
_TORCH = str(Path(torch.__file__).parent)
_HERE = __file__


@dataclass(frozen=True)
class HostSync:
    """One read: the step it fell in (1-based; 0 before the first), the operation, and where:
    the innermost line outside torch that made it and, when that line is another library's
    (transformers', ...), the innermost line of ours that called it (`via`)."""

    step: int
    op: str
    where: str
    via: str | None = None

    @property
    def ours(self) -> bool:
        """Made by dclr's code (or a plugin's, a test's): not inside another library."""
        return self.via is None


@dataclass
class HostSyncs:
    """What `record_host_syncs` saw over a run of `steps` steps."""

    detector: str  # "cuda" (CUDA's sync detector) or "cpu-calls" (the calls that would wait)
    steps: int
    ordinary: list[int]  # the steps that neither log, evaluate nor checkpoint
    events: list[HostSync] = field(default_factory=list)

    def in_ordinary_steps(self) -> list[HostSync]:
        ordinary = set(self.ordinary)
        return [e for e in self.events if e.step in ordinary]

    def summary(self) -> dict[str, Any]:
        """The figures a report shows: reads per ordinary step (the most, and in all) and where
        they were made, each place with its count."""
        seen = self.in_ordinary_steps()
        per_step = Counter(e.step for e in seen)
        places = Counter(e.where + (f" (via {e.via})" if e.via else "") for e in seen)
        return {"detector": self.detector, "steps": self.steps,
                "ordinary_steps": len(self.ordinary),
                "syncs_in_ordinary_steps": len(seen),
                "ours_in_ordinary_steps": sum(e.ours for e in seen),
                "max_per_ordinary_step": max(per_step.values(), default=0),
                "syncs_in_other_steps": len(self.events) - len(seen),
                "where": dict(places.most_common())}  # fmt: skip


def _place(frame: traceback.FrameSummary) -> str:
    path = frame.filename.replace("\\", "/")
    for marker in ("/site-packages/", "/src/", "/tests/", "/benchmarks/"):
        if marker in path:
            path = ("tests/" if marker == "/tests/" else "") + path.split(marker, 1)[1]
            break
    return f"{path}:{frame.lineno} in {frame.name}"


def _library(frame: traceback.FrameSummary) -> bool:
    path = frame.filename.replace("\\", "/")
    return "/site-packages/" in path and "/site-packages/dclr/" not in path


def _where(stack: list[traceback.FrameSummary]) -> tuple[str, str | None]:
    """The innermost frame outside torch, this module and `warnings`; when that one is another
    library's (transformers', ...), the innermost frame of ours that called it (`via`)."""
    frames = [f for f in stack if not f.filename.startswith(_TORCH)
              and f.filename != _HERE and not f.filename.endswith("/warnings.py")]  # fmt: skip
    if not frames:
        return "?", None
    inner = frames[-1]
    if not _library(inner):
        return _place(inner), None
    ours = [f for f in frames if not _library(f)]
    return _place(inner), _place(ours[-1]) if ours else "?"


class _HostReads(TorchFunctionMode):
    """The CPU's recorder, Python side: each HOST_READS method. While one runs, `reading` is
    set, so its aten call (`_local_scalar_dense`) is not counted a second time. (`.to(device)`
    is not counted: on a CPU run the device is the CPU, so it cannot be told from a read.)"""

    def __init__(self, seen: Callable[[str], None]) -> None:
        super().__init__()
        self.seen, self.reading = seen, False

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_READS:
            self.seen(name)
            self.reading = True
            try:
                return func(*args, **kwargs)
            finally:
                self.reading = False
        return func(*args, **kwargs)


class _SyncOps(TorchDispatchMode):
    """The CPU's recorder, aten side: each SYNC_OPS call not already counted by `reads`, and
    each index by a boolean mask."""

    def __init__(self, seen: Callable[[str], None], reads: _HostReads) -> None:
        super().__init__()
        self.seen, self.reads = seen, reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        if name in SYNC_OPS and not (self.reads.reading and name == "_local_scalar_dense"):
            self.seen(name)
        elif name == "index" and any(
            isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())
        ):
            self.seen("index (boolean mask)")
        return func(*args, **(kwargs or {}))


@contextmanager
def _cpu_detector(seen: Callable[[str], None]) -> Iterator[None]:
    reads = _HostReads(seen)
    with reads, _SyncOps(seen, reads):
        yield


@contextmanager
def _cuda_detector(seen: Callable[[str], None]) -> Iterator[None]:
    """CUDA's sync detector on, each of its warnings to `seen` (any thread), the rest shown."""
    previous_mode = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():  # restores the filters and `showwarning` on the way out
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
            if CUDA_SYNC_MESSAGE in str(message):
                seen("cuda synchronize")
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.filterwarnings("always", message=f".*{CUDA_SYNC_MESSAGE}")
        warnings.showwarning = show
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield
        finally:
            torch.cuda.set_sync_debug_mode(previous_mode)


def record_host_syncs(trainer: Any, **train_options: Any) -> HostSyncs:
    """Train (`trainer.train(**train_options)`) and record every host read of a device value
    (module docstring): the run's steps, its ordinary steps and each read."""
    from dclr.training.loop import checkpoint_due

    current = [0]
    events: list[HostSync] = []

    def seen(op: str) -> None:
        where, via = _where(traceback.extract_stack())
        events.append(HostSync(current[0], op, where, via))

    step = trainer._step

    def counted_step(state: Any, index: int, *args: Any, **kwargs: Any) -> Any:
        current[0] = index + 1
        return step(state, index, *args, **kwargs)

    cuda = trainer.device.type == "cuda"
    detector = _cuda_detector(seen) if cuda else _cpu_detector(seen)
    trainer._step = counted_step
    try:
        with detector:
            trainer.train(**train_options)
    finally:
        del trainer._step  # the class's method again
    total = trainer.run.total_steps
    end = train_options.get("stop_at_step") or total
    every = trainer.config.run.checkpoint_every

    def ordinary(done: int) -> bool:
        last = done == total
        due = trainer._log_due(done, last) or trainer._eval_due(done, last)
        return not (due or checkpoint_due(done, end, total, every))

    steps = [done for done in range(1, end + 1) if ordinary(done)]
    return HostSyncs("cuda" if cuda else "cpu-calls", end, steps, events)
