"""What every experiment's runs are made of: the scales and backbones, `RunSpec`, and the SimCSE /
DCLR run of a backbone (`pair_spec`). The experiments themselves are in `dclr_lab.studies`
(each with its report section), named in `dclr_lab.specs.EXPERIMENTS`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from dclr.lab_api import SHIPPED_RECIPES, ConfigError

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

# Every CPU run evaluates every 10 of its 60 steps (the recipes: 20), so each run's metrics draw a
# uniformity curve and the uniformity experiment reuses the main table's runs. Paper scale keeps
# the recipes' 150: "Models were evaluated every 150 training steps on the STS-B and SICK-R
# development sets" (../shared/papers/dclr.txt l.103).
SCALE_OVERRIDES: dict[str, dict[str, Any]] = {"cpu": {"eval_steps": 10}, "paper": {}}


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


def recipe_file(method: str, scale: str, backbone: str) -> str:
    return f"{method}_{BACKBONES[scale][backbone]}.yaml"


def pair_spec(
    scale: str, backbone: str, seed: int, method: str, overrides: dict[str, Any] | None = None
) -> RunSpec:
    """A SimCSE or DCLR run of `backbone`; at paper scale DCLR's complementary model is SimCSE."""
    overrides = {**SCALE_OVERRIDES[scale], **(overrides or {})}
    complementary = None
    if method == "dclr" and scale == "paper":
        complementary = RunSpec(
            recipe_file("simcse", scale, backbone),
            seed,
            {"role": "complementary"},
            dict(SCALE_OVERRIDES[scale]),
        )
    return RunSpec(
        recipe_file(method, scale, backbone),
        seed,
        {"backbone": backbone, "method": method},
        overrides,
        complementary_from=complementary,
    )


def default_recipes_dir() -> Path:
    """./recipes when it exists, else the recipes dclr ships (the checkout's recipes/ links
    there)."""
    here = Path.cwd() / "recipes"
    return here if here.is_dir() else SHIPPED_RECIPES
