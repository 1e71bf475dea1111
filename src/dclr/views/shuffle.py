"""Token shuffle (ConSERT): the real tokens keep their ids but swap their position ids.

Feeding `position_ids` with the content positions permuted is the same as reordering those tokens
(attention is permutation-equivariant and the poolers average over tokens), without touching
`input_ids`. Special tokens and padding keep their own positions.
"""

from __future__ import annotations

import torch


def shuffle_permutation(content: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """content (b, L) bool -> (b, L) long: slot j takes position perm[j]; identity off content.

    Each row's content slots are permuted uniformly among themselves (drawn on the CPU from
    `generator`, so the result does not depend on the device).
    """
    b, length = content.shape
    mask = content.cpu()
    perm = torch.arange(length).repeat(b, 1)  # (b, L)
    for row in range(b):
        slots = torch.nonzero(mask[row]).squeeze(1)  # (n,)
        perm[row, slots] = slots[torch.randperm(len(slots), generator=generator)]
    return perm.to(content.device)


def shuffled_position_ids(
    content: torch.Tensor, generator: torch.Generator, offset: int = 0
) -> torch.Tensor:
    """(b, L) position ids with the content positions permuted; `offset` is where positions start
    (0 for BERT, padding_idx + 1 for RoBERTa: `dclr.models.packing.position_offset`)."""
    return shuffle_permutation(content, generator) + offset
