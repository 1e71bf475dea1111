"""Calibrated false-negative threshold phi (beyond the paper, which tunes phi by hand).

The paper sets phi per backbone ("The instance-weighting thresholds phi were, respectively,
0.90, 0.85, 0.90, and 0.85", dclr.txt l.103). A fixed cosine does not transfer between
complementary models: a mean-pooled sentence encoder and a raw [CLS] vector put random pairs at
very different cosines. Two rules derive phi from the complementary model itself:

* `random_pairs` (target q): phi is the (1 - q) quantile of cosines between random corpus
  sentences, so about a fraction q of random in-batch negatives is dropped;
* `paraphrase_recall` (target r): phi is the (1 - r) quantile of cosines of known paraphrase
  pairs, so about a fraction r of true false negatives is dropped.

Both are pure functions of similarity values, here and tested on hand-made numbers.
"""

from __future__ import annotations

import numpy as np

from dclr.options.dclr import check_target


def phi_from_random_pairs(vectors: np.ndarray, drop_fraction: float) -> float:
    """(1 - q) quantile of the cosines of all pairs i < j of `vectors` (m, d)."""
    check_target("random_pairs", drop_fraction)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)
    cos = unit @ unit.T  # (m, m)
    upper = cos[np.triu_indices(len(unit), k=1)]
    return float(np.quantile(upper, 1 - drop_fraction))


def phi_from_paraphrases(first: np.ndarray, second: np.ndarray, recall: float) -> float:
    """(1 - r) quantile of cos(first_i, second_i) over known paraphrase pairs, (m, d) each."""
    check_target("paraphrase_recall", recall)
    a = first / np.linalg.norm(first, axis=1, keepdims=True).clip(1e-12)
    b = second / np.linalg.norm(second, axis=1, keepdims=True).clip(1e-12)
    return float(np.quantile((a * b).sum(axis=1), 1 - recall))
