"""What the sentence-transformers losses share: two views from the feature columns, gathering."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from dclr import distributed as dist


def embed(model: Any, features: dict[str, torch.Tensor]) -> torch.Tensor:
    """One forward of a SentenceTransformer on a shallow copy of `features` -> (n, d).

    The copy matters: sentence-transformers modules write their outputs into the dict they get.
    """
    return model(dict(features))["sentence_embedding"]


def two_views(
    model: Any, sentence_features: Iterable[dict[str, torch.Tensor]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """z1, z2 (n, d) from one column (SimCSE: the same sentences twice, dropout makes the views)
    or two columns (anchor, positive). Two separate forwards for one column: independent dropout
    masks exactly as SimCSE's doubled batch, and it works for every feature layout."""
    columns = list(sentence_features)
    if len(columns) == 1:
        return embed(model, columns[0]), embed(model, columns[0])
    if len(columns) == 2:
        return embed(model, columns[0]), embed(model, columns[1])
    raise ValueError(
        f"expected 1 text column (SimCSE style: one sentence, two dropout views) or 2 "
        f"(anchor, positive), got {len(columns)}"
    )


def gather_strings(texts: list[str]) -> list[str]:
    """Every rank's `texts`, concatenated in rank order (the order `gather_with_grad` uses)."""
    if not dist.gathers():
        return texts
    parts: list[list[str] | None] = [None] * dist.world_size()
    torch.distributed.all_gather_object(parts, texts)
    return [t for part in parts for t in (part or [])]


def ddp_scale() -> int:
    """Each rank computes the same global loss with gradients into its own rows only; DDP averages
    gradients over ranks, so scaling the loss by the world size gives the single-process gradient
    of the global batch (see `dclr.distributed`). Without gathering (`dist.gathering(False)`)
    each rank's loss is its own rows' and DDP's average is the mean of those: no scale."""
    return dist.world_size() if dist.gathers() else 1
