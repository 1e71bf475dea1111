"""DCLRLoss vs GISTEmbedLoss vs MNRL on (anchor, positive) pairs through `SentenceTransformerTrainer`
(issue 37).

    python examples/st_pairs_false_negatives.py --data-dir ../shared/data --steps 40

The setting most sentence-transformers users train in: all-MiniLM-L6-v2 as sentence-transformers
loads it (mean pooling, no head), (anchor, positive) pairs, every other pair's positive a negative.
Pairs: INLI train's premises with their explicit and implied entailments (anchor = premise,
positive = entailment; 16,000 pairs), so the same premise now and then meets itself in a batch:
its other entailment is then a natural false negative. Trained from the same start on the same
batches (same seed), one model per loss:

* `losses.MultipleNegativesRankingLoss` (scale 20 = 1 / tau, tau = 0.05);
* `losses.GISTEmbedLoss` (sentence-transformers' own class; guide = a frozen copy of the
  starting model, temperature 0.05, margin 0: its default rule);
* `dclr.st.DCLRLoss` (the same frozen guide, phi = 0.9, paper form with noise negatives).

`--variants` picks others from `dclr_lab.pairs.VARIANTS` (mnrl_nodup: MNRL with
`BatchSamplers.NO_DUPLICATES`; dclr_relative needs the tuning records of the full study). Prints
the 7-task STS table (dclr's SentEval-exact evaluation, mean pooling) and INLI retrieval nDCG@10
of the starting model and of each trained model. The full study, with 3 seeds, paired intervals,
tuning and the false-negative audit: `python -m dclr_lab.pairs` (its report:
docs/results/cpu-scale/pairs/report.md).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

DEFAULT_VARIANTS = "mnrl,gist,dclr"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from dclr_lab.pairs import DEFAULT_MODEL

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model folder or python-package:NAME")
    p.add_argument("--data-dir", default=None, help="folder holding senteval/ and inli/")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated")
    p.add_argument("--eval-tasks", default="", help="comma-separated STS tasks (default: all 7)")
    p.add_argument("--no-retrieval", action="store_true", help="skip the INLI retrieval task")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from dclr.models.encoder import resolve_model
    from dclr_lab.pairs import (
        STS_TASKS,
        VARIANTS,
        Setup,
        evaluate_model,
        one_run,
        training_pairs,
    )

    tasks = tuple(t for t in args.eval_tasks.split(",") if t) or STS_TASKS
    setup = Setup(model=args.model, data_dir=args.data_dir, steps=args.steps,
                  batch_size=args.batch_size, lr=args.lr, retrieval=not args.no_retrieval,
                  sts_tasks=tasks)  # fmt: skip
    pairs = training_pairs(args.data_dir)
    table = {"starting model": evaluate_model(str(resolve_model(args.model)), setup)}
    with tempfile.TemporaryDirectory(prefix="dclr-pairs-example-") as scratch:
        for variant in (v for v in args.variants.split(",") if v):
            record = one_run(setup, pairs, variant, args.seed, Path(scratch))
            table[VARIANTS[variant][0]] = record
    print(f"\n{len(pairs):,} INLI (premise, entailment) pairs; {args.steps} steps of "
          f"{args.batch_size}, lr {args.lr:g}, seed {args.seed}, mean pooling, tau 0.05")  # fmt: skip
    shown = [*tasks, "avg"]
    head = ["model", *shown] + ([] if args.no_retrieval else ["INLI nDCG@10"])
    print("| " + " | ".join(head) + " |")
    print("| --- |" + " ---: |" * (len(head) - 1))
    for name, scores in table.items():
        cells = [f"{scores['sts'][t]:.2f}" for t in shown]
        if not args.no_retrieval:
            cells.append(f"{scores['inli']['ndcg@10']:.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
