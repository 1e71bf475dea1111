"""Does the int8 kernel's speed depend on how the weights were rounded? One static int8 layer
(`dclr.models.static_int8.StaticQLinear`) per rounding (`WEIGHT_MODES`: full range, pairs
clipped, 7-bit) at MiniLM's three weight shapes, rows 13 (one text) and 512 (a bulk pass), two
threads. The roundings are timed in rounds, their order rotated each round, and each one's median
over the rounds is reported with its ratio to full range. Same inputs, same packed layout: only
the integer values of the weights differ.

It answers a question left by `benchmarks/int8_encode.py` under an AVX2 limit, where the two exact
roundings encoded ~10 % faster than full range (docs/performance.md). Writes
benchmarks/results/int8_rounding_speed@<table_name>.{json,md}.

    flock /tmp/dclr-heavy.lock python benchmarks/int8_rounding_speed.py
    ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 \\
        flock /tmp/dclr-heavy.lock python benchmarks/int8_rounding_speed.py
"""

from __future__ import annotations

import dclr  # noqa: F401 - before torch: bounds oneDNN's caches as `dclr serve` does

# isort: split
import argparse
import statistics
import time
from pathlib import Path

import torch
from linear_kernels import SHAPES, emulation_note
from report_files import finished, provenance, save_report
from torch import nn

from dclr.models.cpu_kind import load_average, machine_fields, table_name
from dclr.models.static_int8 import WEIGHT_MODES, SharedQuantizer, StaticQLinear, pairs_saturate

ROOT = Path(__file__).resolve().parents[1]
ROWS = (13, 512)


def timed(layer: nn.Module, x: torch.Tensor, calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(calls):
        layer(x)
    return (time.perf_counter() - start) / calls


def measure(
    shapes: dict[str, tuple[int, int]] = SHAPES,
    rows: tuple[int, ...] = ROWS,
    rounds: int = 30,
    calls: int = 20,
) -> list[dict]:
    """One row per (shape, rows): each rounding's median microseconds per call and its ratio to
    full range (> 1: slower than full)."""
    torch.manual_seed(0)
    out = []
    with torch.inference_mode():
        for name, (k, n) in shapes.items():
            linear = nn.Linear(k, n)
            layers = {m: StaticQLinear(linear, SharedQuantizer(-4.0, 4.0), weights=m)
                      for m in WEIGHT_MODES}  # fmt: skip
            for m in rows:
                x = torch.randn(m, k)
                times: dict[str, list[float]] = {mode: [] for mode in WEIGHT_MODES}
                for layer in layers.values():
                    timed(layer, x, 3)  # warm
                for r in range(rounds):
                    order = WEIGHT_MODES[r % 3 :] + WEIGHT_MODES[: r % 3]
                    for mode in order:
                        times[mode].append(timed(layers[mode], x, calls))
                us = {mode: statistics.median(t) * 1e6 for mode, t in times.items()}
                out.append({"shape": name, "rows": m,
                            "us": {mode: round(v, 1) for mode, v in us.items()},
                            "vs_full": {mode: round(v / us["full"], 3)
                                        for mode, v in us.items()}})  # fmt: skip
    return out


def markdown(report: dict) -> str:
    kernel = "saturating (no VNNI)" if report["pairs_saturate"] else "exact (VNNI)"
    lines = [f"Static int8 layer time by weight rounding, {report['cpu']} "
             f"({report['hardware_key']}, {report['cpu_model']}), int8 kernel {kernel}, "
             f"{report['threads']} threads, torch {report['torch']}, median of "
             f"{report['rounds']} rounds (order rotated), load average {report['load_start']} at "
             f"start, {report['load_end']} at end.", "",
             "| shape | rows | " + " | ".join(f"{m} µs" for m in WEIGHT_MODES) + " | "
             + " | ".join(f"{m} ÷ full" for m in WEIGHT_MODES[1:]) + " |",
             "|---|---:|" + "---:|" * (2 * len(WEIGHT_MODES) - 1)]  # fmt: skip
    for r in report["layers"]:
        lines.append(f"| {r['shape']} | {r['rows']} | "
                     + " | ".join(str(r["us"][m]) for m in WEIGHT_MODES) + " | "
                     + " | ".join(f"{r['vs_full'][m]}×" for m in WEIGHT_MODES[1:]) + " |")  # fmt: skip
    lines += emulation_note(report)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/int8_rounding_speed@<key>.json")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(2)
    out = args.out or ROOT / f"benchmarks/results/int8_rounding_speed@{table_name()}.json"
    report: dict = {**machine_fields(), "torch": torch.__version__, "threads": 2,
                    "pairs_saturate": pairs_saturate(), "rounds": args.rounds,
                    "load_start": load_average(), "provenance": provenance()}  # fmt: skip
    report["layers"] = measure(rounds=args.rounds)
    report["load_end"] = load_average()
    report["command"] = "python benchmarks/int8_rounding_speed.py"
    report["provenance"] = finished(report["provenance"])
    save_report(out, report, markdown(report))


if __name__ == "__main__":
    main()
