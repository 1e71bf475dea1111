"""DualCSE's evaluations: RTE on INLI and EIS (estimating implicitness), for any embedder.

RTE: for each (premise, hypothesis) the score is max(cos(r_p, r_h), cos(u_p, r_h)) (the premise's
explicit and implicit embeddings against the hypothesis's explicit one); the pair is called entailed
when the score exceeds a threshold tuned for accuracy on INLI val (4000 balanced pairs). On INLI
test the result is the accuracy per hypothesis type (explicit and implied entailments should be
called entailed, neutral and contradiction not) and their average, x100.

EIS: for pairs (more-implicit sentence, more-explicit sentence), the share (x100) that the
implicitness score 1 - cos(r, u) orders correctly; a tie counts as half right (a coin flip).

A single-embedding model (the base model, supervised SimCSE) goes through the same code as
`SingleEmbedding`: r = u, so its RTE score is plain cos(p, h) and every implicitness is 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dclr.data.inli import (
    ENTAILED,
    HYPOTHESIS_TYPES,
    EisSplit,
    InliExample,
    inli_split,
    read_eis_file,
    read_inli,
)
from dclr.dualcse.model import DualEncoder, check_semantics, is_dualcse_folder
from dclr.models.encoder import SentenceEncoder
from dclr.models.resolve import resolve_model

PERCENT = 100.0  # accuracies are reported x100, as in the paper's tables


class DualEmbedder(Protocol):
    def encode(  # keyword-only options: DualEncoder.encode has max_length before normalize
        self,
        sentences: Sequence[str],
        semantics: str = "explicit",
        *,
        batch_size: int = 128,
        normalize: bool = False,
        show_progress: bool = False,
    ) -> np.ndarray: ...

    def implicitness(self, sentences: Sequence[str], **encode_options: object) -> np.ndarray: ...


class SingleEmbedding:
    """A one-vector encoder seen as a dual one: r = u = its embedding, implicitness 0."""

    def __init__(self, encoder: SentenceEncoder) -> None:
        self.encoder = encoder

    def encode(
        self,
        sentences: Sequence[str],
        semantics: str = "explicit",
        batch_size: int = 128,
        normalize: bool = False,
        show_progress: bool = False,
    ) -> np.ndarray:
        check_semantics(semantics)
        return self.encoder.encode(
            sentences, batch_size=batch_size, normalize=normalize, show_progress=show_progress
        )

    def implicitness(self, sentences: Sequence[str], **encode_options: object) -> np.ndarray:
        """Exactly 0 for every sentence (1 - cos(r, r) computed would only be rounding noise)."""
        return np.zeros(len(sentences), dtype=np.float32)


def load_embedder(spec: str | Path, pooler: str | None = None) -> DualEncoder | SingleEmbedding:
    """A DualCSE folder -> DualEncoder; any other model (dclr, ST, HF, package) -> SingleEmbedding."""
    path = resolve_model(str(spec))
    if is_dualcse_folder(path):
        return DualEncoder.from_pretrained(path)
    return SingleEmbedding(SentenceEncoder.from_pretrained(path, pooler=pooler))


# ---- RTE -------------------------------------------------------------------------------------
def rte_scores(
    model: DualEmbedder,
    examples: Sequence[InliExample],
    batch_size: int = 128,
    show_progress: bool = False,
) -> dict[str, np.ndarray]:
    """hypothesis type -> (n,) scores max(cos(r_p, r_h), cos(u_p, r_h)) over the n premises."""
    n = len(examples)
    premises = [e.premise for e in examples]
    hypotheses = [e.hypothesis(t) for t in HYPOTHESIS_TYPES for e in examples]  # type-major
    options: dict[str, Any] = {
        "batch_size": batch_size,
        "normalize": True,
        "show_progress": show_progress,
    }
    r = model.encode(premises + hypotheses, "explicit", **options)  # (5n, d), unit rows
    u_premise = model.encode(premises, "implicit", **options)  # (n, d)
    r_premise = r[:n]
    scores = {}
    for k, kind in enumerate(HYPOTHESIS_TYPES):
        r_hyp = r[n * (k + 1) : n * (k + 2)]  # (n, d)
        scores[kind] = np.maximum((r_premise * r_hyp).sum(1), (u_premise * r_hyp).sum(1))
    return scores


def tune_threshold(scores: np.ndarray, entailed: np.ndarray) -> tuple[float, float]:
    """(threshold, accuracy x100) maximising accuracy of `score > threshold` == `entailed`.

    Thresholds are the midpoints between consecutive distinct scores (and one below / at the
    ends); among equally accurate thresholds the lowest wins.
    """
    order = np.argsort(scores, kind="stable")
    s, y = scores[order].astype(np.float64), entailed[order].astype(bool)
    m = len(s)
    # Cut k: the k lowest scores are called not entailed, the rest entailed.
    negatives_below = np.concatenate([[0], np.cumsum(~y)])  # (m + 1,)
    positives_above = y.sum() - np.concatenate([[0], np.cumsum(y)])  # (m + 1,)
    correct = negatives_below + positives_above
    valid = np.ones(m + 1, dtype=bool)
    valid[1:m] = s[1:] > s[:-1]  # a cut between equal scores is not a threshold
    k = int(np.flatnonzero(valid)[np.argmax(correct[valid])])
    if k == 0:
        threshold = s[0] - 1.0  # below every score: all entailed
    elif k == m:
        threshold = s[-1]  # score > max never holds: none entailed
    else:
        threshold = (s[k - 1] + s[k]) / 2
    return float(threshold), float(PERCENT * correct[k] / m)


def rte_accuracy(scores: dict[str, np.ndarray], threshold: float) -> dict[str, float]:
    """Accuracy x100 per hypothesis type at `threshold`, and their average `avg`."""
    results = {}
    for kind in HYPOTHESIS_TYPES:
        called_entailed = scores[kind] > threshold
        right = called_entailed if kind in ENTAILED else ~called_entailed
        results[kind] = float(PERCENT * right.mean())
    results["avg"] = float(np.mean([results[k] for k in HYPOTHESIS_TYPES]))
    return results


class RteEvaluator:
    """RTE on INLI: threshold tuned on `val`, accuracies on `test` (both lists of InliExample).

    `RteEvaluator.from_data_dir(dir)` reads INLI val/test; calling it with a model returns
    {explicit, implied, neutral, contradiction, avg (the primary metric), threshold, val_accuracy}.
    """

    primary_metric = "avg"

    def __init__(self, val: Sequence[InliExample], test: Sequence[InliExample]) -> None:
        self.val, self.test = list(val), list(test)

    @classmethod
    def from_data_dir(cls, data_dir: str | Path | None = None) -> RteEvaluator:
        return cls(read_inli(inli_split(data_dir, "val")), read_inli(inli_split(data_dir, "test")))

    def __call__(
        self, model: DualEmbedder, batch_size: int = 128, show_progress: bool = False
    ) -> dict[str, float]:
        val = rte_scores(model, self.val, batch_size, show_progress)
        scores = np.concatenate([val[k] for k in HYPOTHESIS_TYPES])
        entailed = np.concatenate([np.full(len(val[k]), k in ENTAILED) for k in HYPOTHESIS_TYPES])
        threshold, val_accuracy = tune_threshold(scores, entailed)
        results = rte_accuracy(rte_scores(model, self.test, batch_size, show_progress), threshold)
        return {**results, "threshold": threshold, "val_accuracy": val_accuracy}


# ---- EIS -------------------------------------------------------------------------------------
def eis_accuracy(
    model: DualEmbedder,
    pairs: Sequence[tuple[str, str]],
    batch_size: int = 128,
    show_progress: bool = False,
) -> dict[str, float]:
    """{accuracy x100 (ties count half), ties, n_pairs} of implicitness ordering each pair."""
    implicit = [p[0] for p in pairs]
    explicit = [p[1] for p in pairs]
    scores = model.implicitness(
        implicit + explicit, batch_size=batch_size, show_progress=show_progress
    )
    more, less = scores[: len(pairs)], scores[len(pairs) :]
    ties = more == less
    right = (more > less).sum() + 0.5 * ties.sum()
    return {
        "accuracy": float(PERCENT * right / len(pairs)),
        "ties": int(ties.sum()),
        "n_pairs": len(pairs),
    }


class EisEvaluator:
    """EIS on (more-implicit, more-explicit) pairs: a TSV, or ImpScore's published CSV
    (`dclr.data.inli.read_eis_file`; `split` / `seed` pick DualCSE-sized parts of the CSV)."""

    primary_metric = "accuracy"

    def __init__(self, pairs_file: str | Path, split: EisSplit = "all", seed: int = 0) -> None:
        self.path = Path(pairs_file)
        self.pairs = read_eis_file(self.path, split, seed)

    def __call__(
        self, model: DualEmbedder, batch_size: int = 128, show_progress: bool = False
    ) -> dict[str, float]:
        return eis_accuracy(model, self.pairs, batch_size, show_progress)
