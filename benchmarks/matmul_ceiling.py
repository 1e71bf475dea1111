"""The machine's fp32 matrix-product ceiling at the shapes of a MiniLM / BERT layer, torch threads as
configured: the reference the other benchmarks' GFLOP/s are compared with.

Shapes (tokens x in) @ (in x out) for the attention projections (d x d), the feed-forward layers
(d x 4d, 4d x d), with d = 384 (MiniLM) and 768 (BERT-base), at 2048 tokens. Median of repetitions.
Writes benchmarks/results/matmul_ceiling.json.

    python benchmarks/matmul_ceiling.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from report_files import finished, provenance

from dclr.atomic import write_text

ROOT = Path(__file__).resolve().parents[1]
TOKENS = 2048


def gflops(m: int, k: int, n: int, reps: int = 20) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * m * k * n / statistics.median(times) / 1e9


def main() -> None:
    origin = provenance()
    result: dict[str, object] = {"torch_threads": torch.get_num_threads(), "tokens": TOKENS}
    shapes = {}
    for d in (384, 768):
        for name, (k, n) in {"proj": (d, d), "ffn_in": (d, 4 * d), "ffn_out": (4 * d, d)}.items():
            shapes[f"d{d}_{name}"] = gflops(TOKENS, k, n)
    result["gflop_per_s"] = shapes
    result["max_gflop_per_s"] = max(shapes.values())
    result["command"] = " ".join(["python", *sys.argv])
    result["provenance"] = finished(origin)
    out = ROOT / "benchmarks" / "results" / "matmul_ceiling.json"
    write_text(out, json.dumps(result, indent=2) + "\n")
    for name, value in shapes.items():
        print(f"{name}: {value:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
