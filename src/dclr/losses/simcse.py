"""Unsupervised SimCSE (Gao et al., 2021): two dropout views of each sentence, InfoNCE.

For views z1, z2 of n sentences and temperature tau:
    loss = mean_i -log( exp(cos(z1_i, z2_i)/tau) / sum_j exp(cos(z1_i, z2_j)/tau) )
The positive stays in the denominator; the other n-1 second views are the negatives.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from dclr.distributed import gather_with_grad
from dclr.errors import ConfigError
from dclr.views.pair import PositiveViews


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a: (n, d), b: (m, d) -> (n, m) cosine similarities."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def simcse_loss(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """InfoNCE over in-batch negatives. z1, z2: (n, d) -> scalar mean loss."""
    logits = cosine_matrix(z1, z2) / temperature  # (n, n), positives on the diagonal
    labels = torch.arange(z1.shape[0], device=z1.device)
    if logits.dtype in (torch.float16, torch.bfloat16):  # softmax in fp32 under autocast
        logits = logits.float()
    return F.cross_entropy(logits, labels)


def check_temperature(temperature: float) -> float:
    if not temperature > 0:
        raise ConfigError(f"temperature must be > 0, got {temperature}")
    return float(temperature)


def two_views(
    model: Callable[..., torch.Tensor],
    features: dict[str, torch.Tensor],
    views: PositiveViews | None = None,
    step: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two views of the batch -> z1, z2: (n, d).

    Default (no `views`, or both `dropout`): the batch encoded twice in one forward, dropout
    differing per row. Other strategies (`dclr.views`) are drawn for `step` and encoded per view.
    """
    if views is not None and not views.is_default:
        return views.encode(model, features, step)
    n = features["input_ids"].shape[0]
    doubled = {k: torch.cat([v, v], dim=0) for k, v in features.items()}  # (2n, L)
    z = model(**doubled)  # (2n, d)
    return z[:n], z[n:]


class SimCSELoss(nn.Module):
    """SimCSE's objective around an encoder.

    Args:
        model: maps tokenized features (input_ids, attention_mask, ...) to (n, d) vectors; under
            DDP pass the wrapped model. Views are gathered across ranks before the loss.
        temperature: tau > 0 (SimCSE: 0.05).
        views: positive-view strategies (`dclr.views.PositiveViews`); None: two dropout views.
    Returns a dict with "loss".
    """

    def __init__(
        self,
        model: Callable[..., torch.Tensor],
        temperature: float = 0.05,
        views: PositiveViews | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.temperature = check_temperature(temperature)
        self.views = views

    def forward(
        self, features: dict[str, torch.Tensor], **context: object
    ) -> dict[str, torch.Tensor]:
        step = context.get("step", 0)
        z1, z2 = two_views(self.model, features, self.views, int(step) if step else 0)
        return self.objective(z1, z2, **context)

    def objective(self, z1: torch.Tensor, z2: torch.Tensor, **_: object) -> dict[str, torch.Tensor]:
        """The loss from this rank's two views (n_local, d); gathered across ranks here."""
        return {"loss": simcse_loss(gather_with_grad(z1), gather_with_grad(z2), self.temperature)}
