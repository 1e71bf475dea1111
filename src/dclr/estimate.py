"""Time estimates before long work: a FLOP count scaled by this machine's measured speed.

A transformer forward costs ~2 FLOPs per weight of its linear layers per token; training ~6 (the
forward and twice that for the backward). Before an encode or the training loop we know the
tokens, so `estimate` turns the FLOPs into seconds with the seconds-per-FLOP last measured here
for that kind of work (`~/.cache/dclr/speed.json`, keyed by machine, device and threads); on a
first run on a CPU it uses a rough prior (our choice: 6.5e10 FLOP/s per thread, what
all-MiniLM-L6-v2 encodes at on the 2-core machine dclr is developed on), and on a GPU with no
measurement it gives none rather than a number off by 100x. `record` updates the measurement
after the work (the mean with the previous one, so one slow run on a busy machine moves it half
way). Estimates are printed, never asserted.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dclr import atomic

CPU_PRIOR_FLOPS_PER_THREAD = 6.5e10
FLOPS_PER_WEIGHT_TOKEN = {"encode": 2.0, "train": 6.0}


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


def _read() -> dict[str, float]:
    try:
        data = json.loads(_store().read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def estimate(kind: str, flops: float, device: torch.device) -> Estimate | None:
    """Seconds for `flops` of `kind` work here, or None (a GPU never measured here)."""
    per_flop = _read().get(machine_key(device, kind))
    if per_flop is not None:
        return Estimate(flops * per_flop, measured=True)
    if device.type != "cpu":
        return None
    return Estimate(flops / (CPU_PRIOR_FLOPS_PER_THREAD * torch.get_num_threads()), False)


def record(kind: str, flops: float, seconds: float, device: torch.device) -> None:
    """Remember the measured seconds per FLOP (best effort: a read-only cache is no error)."""
    if flops <= 0 or seconds <= 0:
        return
    data = _read()
    key = machine_key(device, kind)
    now = seconds / flops
    data[key] = now if key not in data else (data[key] + now) / 2
    try:
        path = _store()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(path, json.dumps(data, indent=2) + "\n")
    except OSError:
        pass
