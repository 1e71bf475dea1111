"""DCLR's parts in `SentenceTransformerTrainer`'s logs (TensorBoard, W&B, the console).

sentence-transformers sums whatever a loss returns as a dict, so DCLRLoss's diagnostics (the share
of in-batch negatives its weighting dropped, the noise negatives drawn, the contrastive term)
cannot travel as loss components. `DCLRLoss` keeps their running sums instead (detached tensors:
no device sync per step), and `log_dclr_parts(trainer, loss)` adds their means since the last log
to every training log entry as `dclr/<part>`, ahead of the trainer's reporting callbacks.
"""

from __future__ import annotations

from typing import Any

from transformers import TrainerCallback

PREFIX = "dclr/"


class DCLRPartsCallback(TrainerCallback):
    """Adds the mean of each of `loss`'s parts since the previous log to the trainer's logs."""

    def __init__(self, loss: Any) -> None:
        self.loss = loss

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs is None or "loss" not in logs:  # training entries only, not eval / the summary
            return
        for name, value in self.loss.pop_part_means().items():
            logs[PREFIX + name] = value


def log_dclr_parts(trainer: Any, loss: Any) -> DCLRPartsCallback:
    """Report `loss`'s parts in `trainer`'s logs; the callback goes first, so TensorBoard and the
    other reporting callbacks see the entries it adds."""
    callback = DCLRPartsCallback(loss)
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
