"""ConSERT's objective (Yan et al., ACL 2021): NT-Xent over the 2N views of a batch.

For views z1, z2 of N sentences, stack z = [z1; z2] (2N, d) and let s_ab = cos(z_a, z_b) / tau.
Every view a is an anchor; its positive p(a) is the other view of the same sentence and its
negatives are the 2(N - 1) views of the other sentences (itself excluded):
    loss = mean_a -log( e^{s_a,p(a)} / sum_{b != a} e^{s_ab} )
i.e. both directions (z1 -> z2 and z2 -> z1), with same-side negatives. ConSERT's default
temperature is 0.1 (`dclr.options.contrastive.ConSERTOptions`, declared once for `dclr train`,
this loss and `dclr.st.ConSERTLoss`) and its evaluation pooling the mean of the last two layers
(pooler `avg_top2`).
Compared with SimCSE's InfoNCE (N - 1 negatives, one direction) only the negatives differ.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from dclr.contract import Batch
from dclr.distributed import gather_with_grad
from dclr.losses.infonce import info_nce
from dclr.losses.simcse import SimCSELoss
from dclr.options.contrastive import ConSERTOptions
from dclr.views.pair import PositiveViews


def nt_xent_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent over 2N views. z1, z2: (N, d) -> scalar mean over the 2N anchors."""
    n = z1.shape[0]
    z = torch.cat([z1, z2], dim=0)  # (2N, d)
    self_mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)  # not its own negative
    half = torch.arange(n, device=z.device)
    labels = torch.cat([half + n, half])  # (2N,): z1_i -> z2_i, z2_i -> z1_i
    return info_nce(z, [z], temperature, masked=self_mask, labels=labels)  # (2N, 2N) logits


class ConSERTLoss(SimCSELoss):
    """ConSERT's contrastive objective around an encoder: SimCSELoss with NT-Xent as objective.

    Args:
        model: maps tokenized features to (n, d) vectors (under DDP, the wrapped model).
        temperature: tau > 0 (default `ConSERTOptions`'s, the paper's 0.1).
        views: the two positive-view strategies (`dclr.views.PositiveViews`; ConSERT's best is
            token shuffle + feature cutoff); None: two dropout views.
    With both views `dropout` the views are SimCSE's; only the 2(N - 1) negatives differ.
    Returns a dict with "loss".
    """

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        temperature: float = ConSERTOptions.temperature,
        views: PositiveViews | None = None,
    ) -> None:
        super().__init__(model, temperature, views)

    def objective(
        self, z1: torch.Tensor, z2: torch.Tensor, batch: Batch | None = None
    ) -> dict[str, torch.Tensor]:
        """The loss from this rank's two views (n_local, d); gathered across ranks here."""
        return {"loss": nt_xent_loss(gather_with_grad(z1), gather_with_grad(z2), self.temperature)}
