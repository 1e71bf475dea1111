"""Near-duplicate audit of a user's corpus: how many in-batch negatives a guide model calls
duplicates, and how many pairs each candidate phi (DCLR's false-negative threshold) would drop.

Input: the batches a training run draws (lists of sentences) and the guide's unit vectors of
their sentences. Every unordered pair i < j of a batch is one negative pair (DCLR's logged
`dropped_fraction` counts ordered pairs, n(n-1); the shares are the same). A pair is an *exact
copy* when its two texts are equal after `normalize_text` (case, whitespace), the test
`data.no_duplicates` applies.

A rule drops the pairs whose guide cosine is >= its phi: the fixed grid, the calibrated phis the
caller passes (as `dclr train` computes them), and GISTEmbedLoss's rule. On unsupervised data the
positive is the anchor itself, so GIST's guide cos(anchor, positive) is 1 and its absolute margin
m drops cos > 1 - m: GIST is the fixed phi 1 - m (tests/st/test_gist_equivalence.py), and its
default margin 0 drops exact copies only.

Everything here is a pure function of (sentences, vectors); `dclr.methods.dclr_audit` gathers
them (corpus, sampler, guide, calibration) and `dclr audit` renders the result.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dclr.data.paraphrases import GoldIndex, normalize_text
from dclr.errors import ConfigError
from dclr.evaluation.audit import pr_rows

FIXED_PHIS = (0.7, 0.8, 0.9, 0.95)  # the grid the report always shows (the paper's 0.85-0.9 inside)
QUANTILES = (0.5, 0.9, 0.99, 0.999)  # of the negatives' cosines; the max is reported beside them
EXAMPLES_PER_RULE = 3  # dropped pairs shown per rule: those closest above its phi
GIST_MARGIN = 0.0  # sentence-transformers' GISTEmbedLoss default (absolute margin)
GIST_TOLERANCE = 1e-5  # float32 cosines of equal vectors land within ~1e-6 of 1
# "measurable false negatives": at least 1 in 1,000 non-copy negatives above MEASURE_PHI. Below
# that, DCLR's weighting changes a batch of 64 (2,016 pairs) by about one pair: plain InfoNCE.
MEASURE_PHI = 0.9  # the paper's phi for BERT-base (dclr.txt l.103)
MEASURABLE_SHARE = 1e-3
# The recommended phi is the calibrated one kept inside the range where a guide's cosine still
# means "same meaning": below 0.8 topical neighbours are dropped, above 0.95 only near-copies.
RECOMMENDED_RANGE = (0.8, 0.95)
HISTOGRAM_BINS = 100  # over [-1, 1]
NO_FALSE_NEGATIVES = "no measurable false negatives: plain SimCSE/MNRL"


@dataclass(frozen=True)
class BatchPairs:
    """Every unordered pair i < j of the audited batches: cosine, exact-copy and gold flags, and
    where it is (batch, i, j), so examples can be shown."""

    cos: np.ndarray  # (P,) float
    copy: np.ndarray  # (P,) bool
    gold: np.ndarray  # (P,) bool: a known paraphrase pair or an exact copy
    where: np.ndarray  # (P, 3) int: batch, i, j


def batch_pairs(
    batches: Sequence[Sequence[str]],
    vectors: Callable[[list[str]], np.ndarray],
    gold: GoldIndex | None = None,
) -> BatchPairs:
    """Pairs of every batch; `vectors(sentences)` returns unit-norm rows, one per sentence."""
    distinct = sorted({s for b in batches for s in b})
    table = dict(zip(distinct, vectors(distinct), strict=True))
    gold = gold or GoldIndex(())
    cos, copy, flags, where = [], [], [], []
    for k, sentences in enumerate(batches):
        z = np.stack([table[s] for s in sentences])  # (n, d)
        i, j = np.triu_indices(len(sentences), k=1)  # (n(n-1)/2,) each
        cos.append((z @ z.T)[i, j])
        norm = np.array([normalize_text(s) for s in sentences], dtype=object)
        copy.append(norm[i] == norm[j])
        flags.append(np.asarray(gold.matrix(sentences), dtype=bool)[i, j])
        where.append(np.stack([np.full_like(i, k), i, j], axis=1))
    return BatchPairs(
        np.concatenate(cos).astype(np.float64),
        np.concatenate(copy).astype(bool),
        np.concatenate(flags).astype(bool),
        np.concatenate(where),
    )


def rules(calibrated: dict[str, float], phis: Sequence[float] = FIXED_PHIS) -> dict[str, float]:
    """Rule label -> phi: the fixed grid, the calibrated phis, and GIST's default margin."""
    out = {f"fixed {phi:g}": float(phi) for phi in phis}
    out.update({f"calibrated {label}": float(phi) for label, phi in calibrated.items()})
    out[f"GIST margin {GIST_MARGIN:g}"] = 1.0 - GIST_MARGIN - GIST_TOLERANCE
    return out


def rule_rows(
    pairs: BatchPairs,
    batches: Sequence[Sequence[str]],
    phis: dict[str, float],
    examples: int = EXAMPLES_PER_RULE,
    with_gold: bool = False,
) -> list[dict[str, Any]]:
    """Per rule: pairs dropped, their share, exact copies and near-duplicates among them, the
    non-copy dropped pairs closest above phi, and (with_gold) precision / recall of gold."""
    rows = []
    for label, phi in phis.items():
        dropped = pairs.cos >= phi
        near = dropped & ~pairs.copy
        ranked = np.flatnonzero(near)[np.argsort(pairs.cos[near], kind="stable")]
        row: dict[str, Any] = {
            "rule": label,
            "phi": float(phi),
            "dropped": int(dropped.sum()),
            "dropped_share": float(dropped.mean()) if len(dropped) else float("nan"),
            "exact_copies": int((dropped & pairs.copy).sum()),
            "near_duplicates": int(near.sum()),
            "examples": _examples(pairs, batches, ranked, examples),
        }
        if with_gold:
            pr = pr_rows(pairs.cos, pairs.gold, [phi])[0]
            # None (JSON null), not NaN: nothing dropped has no precision
            row.update({k: None if np.isnan(pr[k]) else pr[k] for k in ("precision", "recall")})
        rows.append(row)
    return rows


def _examples(
    pairs: BatchPairs, batches: Sequence[Sequence[str]], ranked: np.ndarray, k: int
) -> list[dict[str, Any]]:
    """The first k pairs of `ranked` (pair positions), each pair of texts once (the same two
    sentences can meet in several batches)."""
    out: list[dict[str, Any]] = []
    seen: set[frozenset[str]] = set()
    for p in ranked:
        if len(out) == k:
            break
        b, i, j = (int(x) for x in pairs.where[p])
        a, c = batches[b][i], batches[b][j]
        if frozenset((a, c)) not in seen:
            seen.add(frozenset((a, c)))
            out.append({"cos": float(pairs.cos[p]), "a": a, "b": c})
    return out


def recommend(pairs: BatchPairs, calibrated_phi: float | None) -> dict[str, Any]:
    """Which loss and which phi, from the non-copy share above MEASURE_PHI (see the constants)."""
    other = ~pairs.copy
    share = float((pairs.cos[other] >= MEASURE_PHI).mean()) if other.any() else 0.0
    copies = int(pairs.copy.sum())
    dedup = (
        f" {copies} exact-copy pairs: set data.dedup: true (drops copies before training; "
        "cheaper than any phi)."
        if copies
        else ""
    )
    out: dict[str, Any] = {"near_duplicate_share": share, "measure_phi": MEASURE_PHI}
    if share < MEASURABLE_SHARE:
        out.update(loss="simcse", phi=None, text=NO_FALSE_NEGATIVES + "." + dedup)
        return out
    low, high = RECOMMENDED_RANGE
    phi = MEASURE_PHI if calibrated_phi is None else min(max(calibrated_phi, low), high)
    out.update(
        loss="dclr",
        phi=round(phi, 3),
        text=(
            f"{100 * share:.2f} % of the non-copy negatives have guide cosine >= {MEASURE_PHI:g}: "
            f"DCLR (method: dclr, this guide as complementary_model) with "
            f"false_negative_threshold {phi:.3f}, or GISTEmbedLoss with margin {1 - phi:.3f}."
            + dedup
        ),
    )
    return out


def histogram(cos: np.ndarray, bins: int = HISTOGRAM_BINS) -> dict[str, list[float]]:
    counts, edges = np.histogram(cos, bins=bins, range=(-1.0, 1.0))
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def audit_pairs(
    batches: Sequence[Sequence[str]],
    vectors: Callable[[list[str]], np.ndarray],
    calibrated: dict[str, float],
    phis: Sequence[float] = FIXED_PHIS,
    gold: GoldIndex | None = None,
    examples: int = EXAMPLES_PER_RULE,
) -> dict[str, Any]:
    """The audit's data (JSON-ready): pair counts, exact copies, cosine quantiles and histogram,
    one row per rule, the recommendation. `calibrated`: label -> phi, the first one is the one
    recommended (clamped into RECOMMENDED_RANGE). `gold` (known paraphrase pairs): adds
    precision / recall per rule when some gold pair other than a copy occurs in the batches."""
    pairs = batch_pairs(batches, vectors, gold)
    known = int((pairs.gold & ~pairs.copy).sum())
    n = len(pairs.cos)
    q = np.quantile(pairs.cos, QUANTILES) if n else np.full(len(QUANTILES), np.nan)
    return {
        "batches": len(batches),
        "pairs": n,
        "exact_copies": int(pairs.copy.sum()),
        "exact_copy_rate": float(pairs.copy.mean()) if n else float("nan"),
        "gold_pairs_in_batches": known,
        "cos": {
            "mean": float(pairs.cos.mean()) if n else float("nan"),
            **{f"q{100 * p:g}": float(v) for p, v in zip(QUANTILES, q, strict=True)},
            "max": float(pairs.cos.max()) if n else float("nan"),
        },
        "histogram": histogram(pairs.cos),
        "rules": rule_rows(pairs, batches, rules(calibrated, phis), examples, known > 0),
        "recommendation": recommend(pairs, next(iter(calibrated.values()), None)),
    }


# matplotlib is no dependency of dclr (the lab, dclr-lab, depends on it): the fix, where it is missing
PLOT_FIX = "pip install matplotlib (or pip install dclr-lab, which depends on it)"


def check_can_plot() -> None:
    """ConfigError naming the fix when matplotlib is not installed; `dclr audit --png` asks before
    the audit's minutes of encoding, `plot_histogram` before drawing."""
    if importlib.util.find_spec("matplotlib") is None:
        raise ConfigError(
            f"the histogram is drawn with matplotlib, which is not installed: {PLOT_FIX}"
        )


def plot_histogram(result: dict[str, Any], path: str | Path) -> Path:
    """A PNG of `histogram_figure`, written atomically (`dclr.atomic.write_with`); needs
    matplotlib (`check_can_plot`)."""
    check_can_plot()
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    from dclr.atomic import write_with

    fig = histogram_figure(result)
    try:
        return write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    finally:
        plt.close(fig)


def histogram_figure(result: dict[str, Any]) -> Any:
    """The cosine histogram (log counts) titled with the corpus and the recommendation, one
    dashed line per rule's phi and a solid black one at the recommended phi (matplotlib)."""
    import matplotlib.pyplot as plt

    edges = np.asarray(result["histogram"]["edges"])
    counts = np.asarray(result["histogram"]["counts"])
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.stairs(counts, edges, fill=True, alpha=0.6, label=f"{result['pairs']} in-batch pairs")
    for k, row in enumerate(result["rules"]):
        ax.axvline(row["phi"], color=f"C{k + 1}", linestyle="--", linewidth=1,
                   label=f"{row['rule']}: φ={row['phi']:.3f}, drops {row['dropped']}")  # fmt: skip
    rec = result.get("recommendation") or {}
    if rec.get("phi") is not None:
        ax.axvline(
            rec["phi"], color="black", linewidth=2.5, label=f"recommended φ={rec['phi']:.3f}"
        )
        advice = f"recommended: DCLR, φ = {rec['phi']:.3f}"
    else:
        advice = "recommended: plain SimCSE/MNRL (no measurable false negatives)"
    corpus = (result.get("settings") or {}).get("corpus")
    where = f" of {Path(corpus).name}" if corpus else ""
    ax.set_title(f"Guide cosine of in-batch negatives{where}\n{advice}", fontsize=10)
    ax.set_yscale("log")
    ax.set_xlabel("guide cosine of an in-batch negative pair")
    ax.set_ylabel("pairs")
    ax.set_xlim(max(-1.0, float(edges[np.argmax(counts > 0)]) - 0.05), 1.0)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
