"""Alignment and uniformity of embeddings (Wang & Isola, 2020), as used by SimCSE and DCLR."""

from __future__ import annotations

import torch
import torch.nn.functional as F

# Exponents of Wang & Isola's definitions, kept at the values SimCSE and DCLR report.
ALIGN_ALPHA = 2  # l_align = E ||f(x) - f(y)||^alpha over positive pairs
UNIFORM_T = 2  # l_uniform = log E exp(-t ||f(x) - f(y)||^2) over all pairs


def alignment(x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean ||x_i - y_i||^2 over positive pairs after L2 normalisation. x, y: (n, d)."""
    x, y = F.normalize(x.double(), dim=-1), F.normalize(y.double(), dim=-1)
    return (x - y).norm(dim=1).pow(ALIGN_ALPHA).mean().item()


def uniformity(x: torch.Tensor) -> float:
    """log of the mean Gaussian potential over all distinct pairs (i < j). x: (n, d), n >= 2."""
    if x.shape[0] < 2:
        raise ValueError("uniformity needs at least two embeddings")
    x = F.normalize(x.double(), dim=-1)
    return torch.pdist(x, p=2).pow(2).mul(-UNIFORM_T).exp().mean().log().item()
