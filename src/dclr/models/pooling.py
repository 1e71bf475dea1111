"""Poolers as defined in SimCSE's evaluation, as pure functions on backbone outputs.

- `cls`: the backbone's own pooler output (BERT: dense + tanh over [CLS]); in dclr training it means
  [CLS] followed by a train-time MLP head, dropped at inference (SimCSE's `mlp_only_train`).
- `cls_before_pooler`: the last layer's [CLS] vector.
- `mean`: average of the last layer over real (unmasked) tokens.
- `avg_first_last`: average of the first transformer layer (hidden_states[1]; SimCSE fixed its
  earlier use of the embedding layer) and the last layer, then masked mean.
- `avg_top2`: average of the last two layers, then masked mean.
"""

from __future__ import annotations

import torch
from torch import nn

from dclr.models.pooler_names import POOLERS


def masked_mean(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """hidden: (b, L, d); attention_mask: (b, L) of 0/1 -> (b, d)."""
    mask = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (b, L, 1)
    return (hidden * mask).sum(1) / mask.sum(1)


def pool(
    pooler: str,
    attention_mask: torch.Tensor,
    last_hidden: torch.Tensor,
    hidden_states: tuple[torch.Tensor, ...] | None = None,
    pooler_output: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sentence vectors (b, d) from backbone outputs, for one of POOLERS."""
    if pooler == "cls":
        if pooler_output is None:
            raise ValueError(
                "pooler 'cls' needs the backbone's pooler output (this model has none)"
            )
        return pooler_output
    if pooler == "cls_before_pooler":
        return last_hidden[:, 0]
    if pooler == "mean":
        return masked_mean(last_hidden, attention_mask)
    if pooler in ("avg_first_last", "avg_top2"):
        if hidden_states is None:
            raise ValueError(f"pooler {pooler!r} needs all hidden states")
        first = hidden_states[1] if pooler == "avg_first_last" else hidden_states[-2]
        return masked_mean((first + hidden_states[-1]) / 2.0, attention_mask)
    raise ValueError(f"unknown pooler {pooler!r}; choose from {', '.join(POOLERS)}")


def needs_hidden_states(pooler: str) -> bool:
    return pooler in ("avg_first_last", "avg_top2")


class MLPHead(nn.Module):
    """SimCSE's train-time projection: dense + tanh on the [CLS] vector. Never exported."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.activation = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))
