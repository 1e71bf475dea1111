"""Supervised SimCSE (Gao et al., 2021), the single-embedding baseline of DualCSE on INLI.

For anchors h, positives h+ and hard negatives h- (each (n, d)) and temperature tau:
    loss = mean_i -log( e^{cos(h_i, h+_i)/tau} / sum_j [e^{cos(h_i, h+_j)/tau} + e^{cos(h_i, h-_j)/tau}] )
On INLI the anchor is the premise, the positive an entailed hypothesis (explicit, implied, or both as
two triples) and the hard negative its contradiction.
"""

from __future__ import annotations

import torch
from torch import nn

from dclr.losses.dualcse import info_nce
from dclr.losses.simcse import check_temperature


def supervised_simcse_loss(
    anchors: torch.Tensor,
    positives: torch.Tensor,
    hard_negatives: torch.Tensor,
    temperature: float,
) -> torch.Tensor:
    """InfoNCE with in-batch positives and hard negatives as negatives; each (n, d) -> scalar."""
    return info_nce(anchors, [positives, hard_negatives], temperature)


class SupervisedSimCSELoss(nn.Module):
    """Supervised SimCSE around a one-embedding encoder.

    `forward(features)` takes the tokenization of the 3n sentences [anchors; positives; hard
    negatives] and returns {"loss": ...}.
    """

    def __init__(self, model: nn.Module, temperature: float = 0.05) -> None:
        super().__init__()
        self.model = model
        self.temperature = check_temperature(temperature)

    def forward(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        anchors, positives, negatives = self.model(**features).chunk(3)  # each (n, d)
        return {"loss": supervised_simcse_loss(anchors, positives, negatives, self.temperature)}
