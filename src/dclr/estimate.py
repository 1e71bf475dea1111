"""Time estimates before long work: a FLOP count scaled by this machine's measured speed.

A transformer forward costs ~2 FLOPs per weight of its linear layers per token; training ~6 (the
forward and twice that for the backward). Before an encode or the training loop we know the
tokens, so `estimate` turns the FLOPs into seconds with the seconds-per-FLOP last measured here
for that kind of work (`~/.cache/dclr/speed.json`, keyed by machine, device and threads); on a
first run on a CPU it uses a rough prior (our choice: 6.5e10 FLOP/s per thread, what
all-MiniLM-L6-v2 encodes at on the 2-core machine dclr is developed on), and on a GPU with no
measurement it gives none rather than a number off by 100x. `record` adds the measurement after
the work. Measurements are kept per kind of work *and size* (`size_bucket`: small work pays fixed
costs per FLOP, start-up and a first batch, that big work spreads thin, so a 3-step run's
evaluation or a tiny test model's run must not set a full evaluation's estimate), the `RECENT`
latest per size; the estimate is their median (one run on a busy machine is an outlier, not half
the answer) from the nearest size measured, if it is within `MAX_SIZE_GAP` buckets. Estimates are
printed, never asserted.
"""

from __future__ import annotations

import json
import math
import platform
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dclr import atomic

CPU_PRIOR_FLOPS_PER_THREAD = 6.5e10
FLOPS_PER_WEIGHT_TOKEN = {"encode": 2.0, "train": 6.0}
# Measurements kept per (machine, kind, size): the median of 5 ignores up to 2 outliers, and
# follows a machine that really got slower after 3 runs.
RECENT = 5
# Work sizes within a factor of sqrt(10) share measurements (half-decades of FLOPs), and a size
# borrows from a measured size at most 2 buckets (10x) away: per-FLOP cost drifts with size.
SIZE_BASE = math.sqrt(10.0)
MAX_SIZE_GAP = 2


@dataclass(frozen=True)
class Estimate:
    seconds: float
    measured: bool  # from this machine's last measurement (else the rough CPU prior)

    def text(self) -> str:
        s = self.seconds
        amount = f"{s:.0f} s" if s < 90 else f"{s / 60:.1f} min"
        return f"~{amount}" + ("" if self.measured else " (rough: first run on this machine)")


def linear_weights(module: nn.Module) -> int:
    """Weights of the module's linear layers: what a token's matrix products multiply by."""
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def work_flops(kind: str, weights: int, tokens: int) -> float:
    return FLOPS_PER_WEIGHT_TOKEN[kind] * weights * tokens


def _store() -> Path:
    from dclr.data.paths import default_cache_dir

    return default_cache_dir().parent / "speed.json"


def machine_key(device: torch.device, kind: str) -> str:
    return f"{kind}|{platform.node()}|{platform.machine()}|{device.type}|{torch.get_num_threads()}"


def size_bucket(flops: float) -> int:
    """The size class of `flops` of work (half-decades: 1e12 -> 24, 3e12 -> 24, 4e12 -> 25)."""
    return math.floor(math.log(flops, SIZE_BASE))


Samples = dict[str, dict[str, list[float]]]  # machine key -> size bucket -> seconds per FLOP


def _read() -> Samples:
    """The stored measurements; entries of another shape (the one-number-per-machine format of
    earlier releases) are dropped."""
    try:
        data = json.loads(_store().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        key: {
            b: [float(x) for x in samples][-RECENT:]
            for b, samples in sizes.items()
            if isinstance(samples, list) and samples
        }
        for key, sizes in data.items()
        if isinstance(sizes, dict)
    }


def estimate(kind: str, flops: float, device: torch.device) -> Estimate | None:
    """Seconds for `flops` of `kind` work here, or None (a GPU never measured here)."""
    sizes = _read().get(machine_key(device, kind), {})
    if sizes and flops > 0:
        want = size_bucket(flops)
        nearest = min(sizes, key=lambda b: (abs(int(b) - want), -int(b)))
        if abs(int(nearest) - want) <= MAX_SIZE_GAP:
            return Estimate(flops * statistics.median(sizes[nearest]), measured=True)
    if device.type != "cpu":
        return None
    return Estimate(flops / (CPU_PRIOR_FLOPS_PER_THREAD * torch.get_num_threads()), False)


def record(kind: str, flops: float, seconds: float, device: torch.device) -> None:
    """Remember the measured seconds per FLOP (best effort: a read-only cache is no error)."""
    if flops <= 0 or seconds <= 0:
        return
    data = _read()
    samples = data.setdefault(machine_key(device, kind), {}).setdefault(str(size_bucket(flops)), [])
    samples.append(seconds / flops)
    del samples[:-RECENT]
    try:
        path = _store()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(data, indent=2) + "\n")
    except OSError:
        pass
