"""Packed row length: SimCSE training-step time and encoding speed vs tokens per packed row.

Rows as long as the batch's longest sentence (None, the default), 64, 128 and 256 tokens, and the
padded path, on the same batches, alternating (median of repetitions). Training: batch 64,
length 32, the built-in STS corpus; encoding: the 4,000-sentence sample of benchmarks/encode.py,
whose outputs must agree across row lengths (max |delta| <= 1e-5). Writes
benchmarks/results/row_length.json.

    python benchmarks/row_length.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from encode import MODEL, sample  # noqa: E402
from report_files import finished, provenance  # noqa: E402

from dclr.atomic import write_text  # noqa: E402
from dclr.contract import Batch
from dclr.data.corpus import load_corpus  # noqa: E402
from dclr.losses.simcse import SimCSELoss  # noqa: E402
from dclr.models.encoder import SentenceEncoder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROWS: list[int | None] = [None, 64, 128, 256]


def label(rows: int | str | None) -> str:
    return "longest" if rows is None else str(rows)


def train(data_dir: str, reps: int) -> dict[str, float]:
    corpus = load_corpus("sts", data_dir)
    encoder = SentenceEncoder.build(MODEL, pooler="cls", mlp_head=True).train()
    assert encoder.enable_packing()
    loss_fn = SimCSELoss(encoder, 0.05)
    optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-7)
    gen = torch.Generator().manual_seed(0)
    batches = [
        [corpus[int(i)] for i in torch.randperm(len(corpus), generator=gen)[:64]] for _ in range(4)
    ]
    variants: list[int | str | None] = ["padded", *ROWS]
    times: dict[str, list[float]] = {label(v): [] for v in variants}
    for rep in range(reps + 1):  # the first repetition warms up
        for v in variants:
            encoder.packing = v != "padded"
            if v != "padded":
                encoder.row_tokens = v
            for batch in batches:
                start = time.perf_counter()
                features = encoder.tokenize(batch, max_length=32)
                loss_fn(Batch(features))["loss"].backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if rep:
                    times[label(v)].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def encode(data_dir: str, reps: int) -> dict[str, float]:
    sentences = sample(data_dir, 4000)
    encoder = SentenceEncoder.from_pretrained(MODEL, packing=True)
    times: dict[str, list[float]] = {label(v): [] for v in ROWS}
    first = None
    for _ in range(reps):
        for v in ROWS:
            encoder.row_tokens = v
            start = time.perf_counter()
            out = encoder.encode(sentences, batch_size=128)
            times[label(v)].append(time.perf_counter() - start)
            if first is None:
                first = out
            assert np.abs(out - first).max() <= 1e-5, f"rows={v} changes the embeddings"
    return {k: len(sentences) / statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    origin = provenance()
    result = {
        "torch_threads": torch.get_num_threads(),
        "train_seconds_per_step": train(args.data_dir, args.reps),
        "encode_sentences_per_s": encode(args.data_dir, args.reps),
        "command": " ".join(["python", *sys.argv]),
        "provenance": finished(origin),
    }
    out = ROOT / "benchmarks" / "results" / "row_length.json"
    write_text(out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
