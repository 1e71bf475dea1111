"""Cutoff views (Shen et al. 2020, as used by ConSERT): zero parts of the input embeddings.

- token cutoff: floor(rate * n) of a sentence's n content tokens, chosen uniformly, zeroed;
- span cutoff: one contiguous run of floor(rate * n) content tokens, at a uniform start, zeroed;
- feature cutoff: floor(rate * d) of the d embedding dimensions, chosen per sentence, zeroed on
  every content token.
- embedding dropout (ConSERT's "dropout" augmentation, consert.txt l.71): floor(rate * n * d) of
  the n * d elements of a sentence's content-token embedding matrix, chosen uniformly, zeroed.
  As in ConSERT's released code (`_cutoff_embeddings`, direction "random") an exact count is
  zeroed and the rest is not rescaled (unlike `nn.Dropout`'s Bernoulli mask and 1 / (1 - p)).
"Content" means real, non-special tokens (`dclr.views.masks.content_mask`): [CLS]/[SEP] and padding
are never cut. The embeddings are the backbone's input (word) embeddings, passed back as
`inputs_embeds`, so position and token-type embeddings are added by the model as usual. A rate
whose floor is 0 for a short sentence cuts nothing in it (ConSERT's rounding).
Masks are drawn on the CPU from the given generator, so they do not depend on the device.
"""

from __future__ import annotations

import torch

from dclr.views.masks import cut_count


def token_cutoff_mask(
    content: torch.Tensor, rate: float, generator: torch.Generator
) -> torch.Tensor:
    """content (b, L) bool -> (b, L) bool, True on the tokens to zero."""
    mask = content.cpu()
    cut = torch.zeros_like(mask)
    counts = cut_count(mask.sum(1), rate)  # (b,)
    for row in range(mask.shape[0]):
        slots = torch.nonzero(mask[row]).squeeze(1)
        chosen = torch.randperm(len(slots), generator=generator)[: int(counts[row])]
        cut[row, slots[chosen]] = True
    return cut.to(content.device)


def span_cutoff_mask(
    content: torch.Tensor, rate: float, generator: torch.Generator
) -> torch.Tensor:
    """content (b, L) bool -> (b, L) bool, True on one contiguous run of content tokens per row."""
    mask = content.cpu()
    cut = torch.zeros_like(mask)
    counts = cut_count(mask.sum(1), rate)
    for row in range(mask.shape[0]):
        slots = torch.nonzero(mask[row]).squeeze(1)  # (n,), contiguous for one right-padded text
        span = int(counts[row])
        start = int(torch.randint(0, len(slots) - span + 1, (1,), generator=generator))
        cut[row, slots[start : start + span]] = True
    return cut.to(content.device)


def feature_cutoff_mask(
    batch: int, dim: int, rate: float, generator: torch.Generator
) -> torch.Tensor:
    """(batch, dim) bool, True on the floor(rate * dim) dimensions each sentence loses."""
    span = int(cut_count(torch.tensor(dim), rate))
    cut = torch.zeros(batch, dim, dtype=torch.bool)
    for row in range(batch):
        cut[row, torch.randperm(dim, generator=generator)[:span]] = True
    return cut


def element_dropout_mask(
    content: torch.Tensor, dim: int, rate: float, generator: torch.Generator
) -> torch.Tensor:
    """content (b, L) bool -> (b, L, dim) bool, True on floor(rate * n * dim) random elements of
    each row's n content tokens (never on special tokens or padding)."""
    mask = content.cpu()
    cut = torch.zeros(*mask.shape, dim, dtype=torch.bool)  # (b, L, d)
    for row in range(mask.shape[0]):
        slots = torch.nonzero(mask[row]).squeeze(1)  # (n,)
        cells = len(slots) * dim
        count = int(cut_count(torch.tensor(cells), rate))
        chosen = torch.randperm(cells, generator=generator)[:count]  # flat (token, dim) cells
        cut[row, slots[chosen // dim], chosen % dim] = True
    return cut.to(content.device)


def cut_elements(embeds: torch.Tensor, cut: torch.Tensor) -> torch.Tensor:
    """embeds (b, L, d) with the elements where cut (b, L, d) is True set to zero."""
    return embeds.masked_fill(cut.to(embeds.device), 0.0)


def cut_tokens(embeds: torch.Tensor, cut: torch.Tensor) -> torch.Tensor:
    """embeds (b, L, d) with the rows where cut (b, L) is True set to zero."""
    return embeds.masked_fill(cut.to(embeds.device).unsqueeze(-1), 0.0)


def cut_features(
    embeds: torch.Tensor, content: torch.Tensor, columns: torch.Tensor
) -> torch.Tensor:
    """embeds (b, L, d) with columns (b, d) zeroed on the content tokens (b, L) only."""
    where = content.to(embeds.device).unsqueeze(-1) & columns.to(embeds.device).unsqueeze(1)
    return embeds.masked_fill(where, 0.0)  # (b, L, d)
