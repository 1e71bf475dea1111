"""Resolve a calibrated phi for a DCLR run (see `dclr.losses.calibration` for the rules)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dclr.losses.calibration import phi_from_paraphrases, phi_from_random_pairs
from dclr.models.encoder import SentenceEncoder

# Random corpus sentences for `random_pairs`: 4,000 give ~8M pairs, so even q = 0.001 rests on
# ~8k pairs in the tail.
CALIBRATION_SENTENCES = 4_000
# Known paraphrase pairs for `paraphrase_recall`: a small labelled set, as a user would have.
CALIBRATION_PAIRS = 500
# Below these a calibrated phi is one or two cosines, not a quantile: said, not refused (our bound)
MIN_TAIL_PAIRS = 10  # random pairs above phi (target x pairs)
MIN_PARAPHRASE_PAIRS = 50


def calibrate_phi(
    mode: str,
    target: float,
    scorer: SentenceEncoder,
    corpus: Sequence[str],
    paraphrases: Sequence[tuple[str, str]] = (),
    max_length: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """phi for `mode` from the frozen `scorer` (a seeded sample of corpus or pairs)."""
    rng = np.random.default_rng(seed)
    with torch.inference_mode():
        if mode == "random_pairs":
            ids = rng.choice(
                len(corpus), size=min(CALIBRATION_SENTENCES, len(corpus)), replace=False
            )
            vectors = scorer.encode(
                [corpus[int(i)] for i in ids],
                max_length=max_length,
                normalize=False,
                show_progress=True,
                progress_label="calibrate phi (random corpus sentences)",
            )
            phi = phi_from_random_pairs(vectors, target)
            tail = target * len(ids) * (len(ids) - 1) / 2
            if tail < MIN_TAIL_PAIRS:
                warn_thin(f"{len(ids)} corpus sentences put {tail:.3g} random pairs above it")
            return {"mode": mode, "target": target, "phi": phi, "sentences": len(ids)}
        chosen = rng.choice(
            len(paraphrases), size=min(CALIBRATION_PAIRS, len(paraphrases)), replace=False
        )
        pairs = [paraphrases[int(i)] for i in chosen]
        first = scorer.encode([p[0] for p in pairs], max_length=max_length, normalize=False)
        second = scorer.encode([p[1] for p in pairs], max_length=max_length, normalize=False)
        phi = phi_from_paraphrases(first, second, target)
        if len(chosen) < MIN_PARAPHRASE_PAIRS:
            warn_thin(f"it rests on {len(chosen)} known paraphrase pairs")
        return {"mode": mode, "target": target, "phi": phi, "pairs": len(chosen)}


def warn_thin(why: str) -> None:
    """Say that a calibrated phi rests on too little to be the quantile it names."""
    warnings.warn(
        f"the calibrated phi is not a reliable quantile: {why}; use a larger corpus or set phi "
        "yourself (dclr.false_negative_threshold, with dclr.phi_calibration=none)",
        UserWarning,
        stacklevel=3,
    )
