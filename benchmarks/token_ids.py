"""Token ids from the tokenizer's Rust backend (`dclr.models.token_ids.batch_token_ids`) against
the tokenizer's own call (`tokenizer(texts, truncation=True, max_length=L)["input_ids"]`, the
peer: transformers), on the STS corpus's distinct sentences with MiniLM's tokenizer; a training
step's padded batch (`batch_features`, 512 sentences at max length 32) against the padded call;
and the 7-task STS evaluation (`dclr.evaluate`, padded batches as on a GPU) of a random 2-layer model,
whose forward costs little, so its time is mostly the host's work, with either path.

Both are alternated, median of `--repeats`; the ids are checked equal. Writes
benchmarks/results/token_ids@<table_name>.{json,md}.

    python benchmarks/token_ids.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def the_call(tokenizer: Any, texts: list[str], limit: int) -> list[list[int]]:
    """The peer: the tokenizer's own call, ids kept (what dclr did before, as it did it)."""
    return list(tokenizer(texts, truncation=True, max_length=limit)["input_ids"])


def alternate(variants: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each variant, run in turn `repeats` times after one warm-up each."""
    for fn in variants.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            tic = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - tic)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("DCLR_DATA_DIR"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    load_start = os.getloadavg()[0]
    import torch
    from gpu_check import MODEL, tiny_model
    from report_files import finished, provenance
    from transformers import AutoTokenizer

    import dclr.models.encoder as encoder_module
    from dclr.api import evaluate
    from dclr.atomic import write_text
    from dclr.data.corpus import load_corpus
    from dclr.models.cpu_kind import hardware_key, table_name
    from dclr.models.encoder import model_limit
    from dclr.models.resolve import resolve_model
    from dclr.models.token_ids import batch_features, batch_token_ids

    origin = provenance()
    tokenizer = AutoTokenizer.from_pretrained(resolve_model(MODEL))
    limit = model_limit(tokenizer)
    sentences = list(dict.fromkeys(load_corpus("sts", args.data_dir)))
    same = batch_token_ids(tokenizer, sentences, limit) == the_call(tokenizer, sentences, limit)
    ids = alternate(
        {
            "dclr batch_token_ids": lambda: batch_token_ids(tokenizer, sentences, limit),
            "transformers call": lambda: the_call(tokenizer, sentences, limit),
        },
        args.repeats,
    )
    batch = sentences[:512]  # a training step's padded batch (batch 512, max length 32)
    padded = alternate(
        {
            "padded batch of 512, dclr batch_features": lambda: batch_features(
                tokenizer, batch, 32
            ),
            "padded batch of 512, transformers call": lambda: tokenizer(
                batch, padding=True, truncation=True, max_length=32, return_tensors="pt"
            ),
        },
        args.repeats * 10,
    )
    same_padded = all(
        torch.equal(a, b)
        for a, b in zip(
            batch_features(tokenizer, batch, 32).values(),
            tokenizer(batch, padding=True, truncation=True, max_length=32,
                      return_tensors="pt").values(),
            strict=True,
        )
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="dclr-token-ids-") as tmp:
        tiny = tiny_model(Path(tmp) / "tiny")

        def evaluation(path: Callable[..., list[list[int]]]) -> Callable[[], object]:
            def run() -> object:
                encoder_module.batch_token_ids = path  # what SentenceEncoder.token_ids calls
                try:
                    return evaluate(tiny, data_dir=args.data_dir, pooler="mean", packing=False)
                finally:
                    encoder_module.batch_token_ids = batch_token_ids

            return run

        scores = {
            name: run()["avg"]  # type: ignore[index]
            for name, run in (
                ("dclr", evaluation(batch_token_ids)),
                ("call", evaluation(the_call)),
            )
        }
        evaluations = alternate(
            {
                "evaluation, dclr batch_token_ids": evaluation(batch_token_ids),
                "evaluation, transformers call": evaluation(the_call),
            },
            args.repeats,
        )
    key = hardware_key()
    report = {
        "hardware_key": key,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "sentences": len(sentences),
        "max_length": limit,
        "ids_equal": same,
        "padded_batch_equal": same_padded,
        "evaluation_sts_avg_equal": scores["dclr"] == scores["call"],
        "median_seconds": {**ids, **padded, **evaluations},
        "ratio_ids": ids["transformers call"] / ids["dclr batch_token_ids"],
        "ratio_padded_batch": padded["padded batch of 512, transformers call"]
        / padded["padded batch of 512, dclr batch_features"],
        "ratio_evaluation": evaluations["evaluation, transformers call"]
        / evaluations["evaluation, dclr batch_token_ids"],
        "repeats": args.repeats,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg()[0],
        "command": " ".join(["python", *sys.argv]),
        "provenance": finished(origin),
    }
    out = args.out or ROOT / "benchmarks" / "results" / f"token_ids@{table_name()}.json"
    write_text(out, json.dumps(report, indent=2) + "\n")
    lines = [
        f"# Token ids: dclr's backend path against the tokenizer's call ({key})",
        "",
        f"{len(sentences):,} distinct STS sentences, MiniLM's tokenizer, max length {limit}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of "
        f"{args.repeats}, alternated; load average {load_start:.2f} at the start, "
        f"{report['load_average_end']:.2f} at the end. "
        f"Ids equal: {same}; padded batch equal: {same_padded}; evaluation STS avg equal: "
        f"{report['evaluation_sts_avg_equal']}.",
        "",
        "| what | ms |",
        "| --- | ---: |",
        *(f"| {name} | {1000 * s:.1f} |" for name, s in report["median_seconds"].items()),
        "",
        f"Ids {report['ratio_ids']:.2f}x the call's speed; a padded batch of 512 (the training "
        f"step's, on its prefetch thread; median of {args.repeats * 10}) "
        f"{report['ratio_padded_batch']:.2f}x; the 7-task evaluation of a random 2-layer model "
        f"(padded batches) {report['ratio_evaluation']:.2f}x.",
        "",
        f"`{report['command']}`",
    ]
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if same and same_padded and report["evaluation_sts_avg_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
