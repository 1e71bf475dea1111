"""Which token positions a view may change: real tokens that are not special tokens."""

from __future__ import annotations

from collections.abc import Iterable

import torch


def content_mask(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, special_ids: Iterable[int]
) -> torch.Tensor:
    """(b, L) bool: True on real (unmasked) tokens that are not special ([CLS], [SEP], <s>, ...)."""
    special = torch.tensor(sorted(set(special_ids)), dtype=input_ids.dtype, device=input_ids.device)
    return attention_mask.bool() & ~torch.isin(input_ids, special)


def cut_count(length: torch.Tensor, rate: float) -> torch.Tensor:
    """Tokens (or dimensions) to cut out of `length`: floor(rate * length), as ConSERT does."""
    return torch.floor(length.to(torch.float64) * rate).to(torch.long)
