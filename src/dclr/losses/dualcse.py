"""DualCSE (Oda et al., 2025): two embeddings per sentence, r (explicit) and u (implicit).

With v(a, b) = exp(cos(a, b) / tau), for premise i with explicit-entailment hypothesis (r+_i1, u+_i1),
implied-entailment hypothesis (r+_i2, u+_i2) and contradiction (r-_i, u-_i), every sum over j
running over the batch:

    explicit:            -log v(r_i, r+_i1)   / sum_j [v(r_i, r+_j1) + v(r_i, r-_j) + v(r_i, u_j)]
    implicit:            -log v(u_i, r+_i2)   / sum_j [v(u_i, r+_j2) + v(u_i, r-_j) + v(u_i, r_j)]
    intra_explicit:      -log v(r+_i1, u+_i1) / sum_j v(r+_i1, u+_j1)
    intra_implied:       -log v(r+_i2, u+_i2) / sum_j v(r+_i2, u+_j2)
    intra_contradiction: -log v(r-_i, u-_i)   / sum_j v(r-_i, u-_j)

The loss is the sum of the five batch means. The premise's explicit embedding goes to its explicit
entailment, its implicit embedding to its implied entailment, and each is pushed away from the
contradictions and from the premises' other embedding (including its own: v(r_i, u_i) is in the
denominator). The intra-sentence terms keep a hypothesis's two embeddings together, since a
hypothesis says what it means.

Switches (the paper's ablations): `contradiction_negatives=False` drops the v(., r-_j) negatives and
the intra_contradiction term; `intra_sentence=False` drops the three intra terms. With both off,
the explicit term is supervised SimCSE's InfoNCE (premise -> explicit entailment) with the premises'
implicit embeddings as the only extra negatives.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from dclr.contract import Batch
from dclr.distributed import gather_with_grad
from dclr.losses.infonce import info_nce
from dclr.losses.simcse import check_temperature
from dclr.options.dualcse import DualCSEOptions

# The loss parts, in the order of the docstring; each is logged on its own.
DUALCSE_TERMS = ("explicit", "implicit", "intra_explicit", "intra_implied", "intra_contradiction")


class DualEmbeddings(NamedTuple):
    """The two embeddings of n sentences: r (explicit semantics) and u (implicit), each (n, d)."""

    r: torch.Tensor
    u: torch.Tensor


def dualcse_loss(
    premise: DualEmbeddings,
    explicit: DualEmbeddings,
    implied: DualEmbeddings,
    contradiction: DualEmbeddings,
    temperature: float,
    contradiction_negatives: bool = True,
    intra_sentence: bool = True,
) -> dict[str, torch.Tensor]:
    """The DualCSE loss of a batch of n premises; every tensor (n, d).

    Returns {"loss": sum of the parts, <part>: batch mean of each part in use} (see DUALCSE_TERMS).
    """
    negatives = [contradiction.r] if contradiction_negatives else []
    parts = {
        "explicit": info_nce(premise.r, [explicit.r, *negatives, premise.u], temperature),
        "implicit": info_nce(premise.u, [implied.r, *negatives, premise.r], temperature),
    }
    if intra_sentence:
        parts["intra_explicit"] = info_nce(explicit.r, [explicit.u], temperature)
        parts["intra_implied"] = info_nce(implied.r, [implied.u], temperature)
        if contradiction_negatives:
            parts["intra_contradiction"] = info_nce(contradiction.r, [contradiction.u], temperature)
    return {"loss": torch.stack(list(parts.values())).sum(), **parts}


class DualCSELoss(nn.Module):
    """DualCSE's objective around a dual encoder.

    Args:
        model: called as `model(semantics, **features)` with semantics "explicit" or "implicit",
            mapping tokenized features to (b, d) vectors (a `dclr.dualcse.model.DualEncoder`).
        options: `DualCSEOptions` (`dclr.options.dualcse`, where each is documented):
            tau and the two switches of `dualcse_loss`; None: the paper's.

    `forward(batch)` takes `batch.features` = {"explicit": ..., "implicit": ...}, each the
    tokenization (for that semantics) of the 4n sentences [premises; explicit entailments; implied
    entailments; contradictions], and returns the dict of `dualcse_loss`.
    """

    def __init__(self, model: nn.Module, options: DualCSEOptions | None = None) -> None:
        super().__init__()
        options = (options or DualCSEOptions()).loss_options()
        options.check_options()
        self.options = options
        self.model = model
        self.temperature = check_temperature(options.temperature)

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        features = batch.features
        r = self.model("explicit", **features["explicit"])  # (4n, d)
        u = self.model("implicit", **features["implicit"])  # (4n, d)
        # under torchrun each block holds every rank's rows, in rank order: one global loss
        premise, explicit, implied, contradiction = (
            DualEmbeddings(gather_with_grad(r_k), gather_with_grad(u_k))
            for r_k, u_k in zip(r.chunk(4), u.chunk(4), strict=True)
        )
        return dualcse_loss(
            premise,
            explicit,
            implied,
            contradiction,
            self.temperature,
            contradiction_negatives=self.options.contradiction_negatives,
            intra_sentence=self.options.intra_sentence,
        )
