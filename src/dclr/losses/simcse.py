"""Unsupervised SimCSE (Gao et al., 2021): two dropout views of each sentence, InfoNCE.

For views z1, z2 of n sentences and temperature tau:
    loss = mean_i -log( exp(cos(z1_i, z2_i)/tau) / sum_j exp(cos(z1_i, z2_j)/tau) )
The positive stays in the denominator; the other n-1 second views are the negatives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from dclr.contract import Batch
from dclr.distributed import gather_with_grad
from dclr.errors import ConfigError
from dclr.losses.infonce import cosine_matrix as cosine_matrix  # re-exported for callers
from dclr.losses.infonce import info_nce
from dclr.options.contrastive import SimCSEOptions
from dclr.views.pair import PositiveViews


def simcse_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE over in-batch negatives. z1, z2: (n, d) -> scalar mean loss."""
    return info_nce(z1, [z2], temperature)  # (n, n) logits, positives on the diagonal


def check_temperature(temperature: float) -> float:
    if not temperature > 0:
        raise ConfigError(f"temperature must be > 0, got {temperature}")
    return float(temperature)


def two_views(
    model: Callable[..., torch.Tensor],
    features: dict[str, torch.Tensor],
    views: PositiveViews | None = None,
    step: int = 0,
    drawn: Mapping[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of the batch -> z1, z2: (n, d).

    Default (no `views`, or both `dropout`): the batch encoded twice in one forward, dropout
    differing per row. Other strategies (`dclr.views`) are encoded per view, as `drawn` for the
    step with the batch (`draw_two_views`), or drawn here for `step`.
    """
    if views is not None and not views.is_default:
        return views.encode(model, features, step, drawn)
    n = features["input_ids"].shape[0]
    doubled = {k: torch.cat([v, v], dim=0) for k, v in features.items()}  # (2n, L)
    z = model(**doubled)  # (2n, d)
    return z[:n], z[n:]


def draw_two_views(model: Any, views: PositiveViews | None, batch: Batch) -> dict[str, Any] | None:
    """The views of `batch` drawn on its host features (`DrawsAhead`); None for dropout views."""
    if views is None or views.is_default:
        return None
    return views.draw(model, dict(batch.features), batch.step)


class TwoViewObjective(nn.Module):
    """An objective on two views of the batch: `forward(batch)` encodes them (`two_views`, as
    drawn ahead with the host batch when `batch.drawn` holds them) and returns
    `objective(z1, z2, batch)`. Subclasses set `self.model` and `self.views`."""

    model: Callable[..., torch.Tensor]
    views: PositiveViews | None

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        features = dict(batch.features)
        z1, z2 = two_views(self.model, features, self.views, batch.step, batch.drawn)
        return self.objective(z1, z2, batch)

    def draw_ahead(self, batch: Batch) -> dict[str, Any] | None:
        return draw_two_views(self.model, self.views, batch)

    def objective(
        self, z1: torch.Tensor, z2: torch.Tensor, batch: Batch | None = None
    ) -> dict[str, torch.Tensor]:
        raise NotImplementedError


class SimCSELoss(TwoViewObjective):
    """SimCSE's objective around an encoder.

    Args:
        model: maps tokenized features (input_ids, attention_mask, ...) to (n, d) vectors; under
            DDP pass the wrapped model. Views are gathered across ranks before the loss.
        temperature: tau > 0 (default `SimCSEOptions`'s, SimCSE's 0.05).
        views: positive-view strategies (`dclr.views.PositiveViews`); None: two dropout views.
    `forward(batch)` reads `batch.features` (one tokenization of the n sentences) and `batch.step`.
    Returns a dict with "loss".
    """

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        temperature: float = SimCSEOptions.temperature,
        views: PositiveViews | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.temperature = check_temperature(temperature)
        self.views = views

    def objective(
        self, z1: torch.Tensor, z2: torch.Tensor, batch: Batch | None = None
    ) -> dict[str, torch.Tensor]:
        """The loss from this rank's two views (n_local, d); gathered across ranks here."""
        return {"loss": simcse_loss(gather_with_grad(z1), gather_with_grad(z2), self.temperature)}
