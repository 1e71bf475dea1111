"""Alignment and uniformity of embeddings (Wang & Isola, 2020), as SimCSE and DCLR report them.

`alignment` and `uniformity` are the definitions over a whole set: every positive pair, every
distinct pair of sentences. `released_geometry` is the estimator DCLR's released code logs
(`senteval/sts.py` l.61-111 of RUCAIBox/DCLR, read by `simcse/trainers.py` l.132-134): per
SentEval batch, then the mean of the batches' values. It differs, so its numbers are named apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
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


RELEASED_BATCH = 128  # SentEval's batch size (the released trainer sets none: the engine's 128)
RELEASED_ALIGN_MIN = 4.0  # positives: gold >= 4.0 (released `batch_gs_scores[i] >= 4.0`)


def released_geometry(
    splits: Sequence[tuple[torch.Tensor, torch.Tensor, np.ndarray]],
    batch: int = RELEASED_BATCH,
) -> dict[str, float]:
    """DCLR's released alignment and uniformity: for each split's pairs (x1, x2: (n, d), gold
    scores (n,)) in file order, per batch of `batch` pairs, the alignment of its pairs with gold
    >= 4 and the uniformity of its 2b vectors (a sentence in both columns counted twice); then
    the mean over every batch of every split. The released "dev" figures accumulate STS-B train
    and dev (its lists are never reset between SentEval's splits), so pass both, train first.
    A batch with no pair >= 4 makes the alignment NaN, as there (the mean of an empty set)."""
    aligns, uniforms = [], []
    for x1, x2, scores in splits:
        for start in range(0, len(scores), batch):
            a, b = x1[start : start + batch], x2[start : start + batch]
            positive = torch.from_numpy(
                np.asarray(scores[start : start + batch]) >= RELEASED_ALIGN_MIN
            )
            aligns.append(alignment(a[positive], b[positive]))  # NaN when none is positive
            uniforms.append(uniformity(torch.cat([a, b])))
    return {"alignment": float(np.mean(aligns)), "uniformity": float(np.mean(uniforms))}
