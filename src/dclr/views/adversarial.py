"""Adversarial views (ConSERT's "adversarial attack"): an FGSM-style step on the input embeddings.

Given the gradient g of a supervised loss with respect to the input embeddings, each sentence's
embeddings move by epsilon * g / ||g||_2 (the norm over that sentence's content tokens and
dimensions), a fast-gradient step of L2 size epsilon. Special tokens and padding are not moved; a
zero gradient moves nothing. The perturbation is a constant (no gradient flows through it).
"""

from __future__ import annotations

import torch

from dclr.errors import ConfigError


def fgsm_perturbation(grad: torch.Tensor, content: torch.Tensor, epsilon: float) -> torch.Tensor:
    """grad (b, L, d), content (b, L) bool -> delta (b, L, d) with ||delta_i||_2 = epsilon (or 0)."""
    if not epsilon >= 0:
        raise ConfigError(f"adversarial epsilon must be >= 0, got {epsilon}")
    g = grad.detach() * content.unsqueeze(-1).to(grad.dtype)  # (b, L, d)
    norm = g.flatten(1).norm(dim=1).reshape(-1, 1, 1)  # (b, 1, 1)
    safe = norm.clamp_min(torch.finfo(g.dtype).tiny)
    return torch.where(norm > 0, epsilon * g / safe, torch.zeros_like(g))
