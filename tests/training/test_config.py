"""Recipes and option validation."""

import os

import pytest
from helpers import REPO_ROOT

from dclr.errors import ConfigError
from dclr.options.config import TrainConfig
from dclr.recipe import load_config, parse_overrides

RECIPES = sorted((REPO_ROOT / "recipes").glob("*.yaml"))


def test_recipes_exist():
    assert len(RECIPES) >= 5


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_every_shipped_recipe_validates(recipe):
    config = load_config(recipe)
    assert isinstance(config, TrainConfig)
    assert config.model


def test_overrides_are_typed():
    config = load_config(
        None,
        parse_overrides(
            [
                "model=m",
                "max_steps=7",
                "learning_rate=1e-5",
                "dropout=null",
                "mlp_head=false",
                "pooler=mean",
                "weight-decay=0.01",  # a dash in a key reads as `_` (as the CLI's --max-steps)
            ]
        ),
    )
    assert config.optimisation.max_steps == 7 and config.optimisation.learning_rate == 1e-5
    assert type(config.optimisation.max_steps) is int and config.optimisation.weight_decay == 0.01
    assert config.model.dropout is None and config.model.mlp_head is False


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"temperature": 0}, "temperature"),
        ({"temperature": -1}, "temperature"),
        ({"batch_size": 1}, "batch_size"),
        ({"pooler": "max"}, "unknown pooler"),
        ({"pooler": "mean"}, "mlp_head"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"precision": "fp8"}, "precision"),
        ({"no_such_option": 1}, "unknown option"),
        ({"max_steps": "ten"}, "number"),
        ({"max_steps": 7.5}, "max_steps must be an integer"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_invalid_options_are_rejected_with_a_reason(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"model": "m", **override})


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"noise_weighting": "complementary", "weighting": "none"}, "noise_weighting"),
        ({"noise_weighting": "complementary", "dclr_form": "official"}, "noise_weighting"),
        ({"noise_weighting": "always"}, "noise_weighting"),
    ],
)
def test_invalid_dclr_options_are_rejected(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"model": "m", "method": "dclr", **override})


def test_noise_weighting_defaults_to_the_released_code():
    config = load_config(None, {"model": "m", "method": "dclr"})
    assert config.section("dclr").noise_weighting == "none"
    faithful = load_config(
        None, {"model": "m", "method": "dclr", "noise_weighting": "complementary"}
    )
    assert faithful.section("dclr").noise_weighting == "complementary"


def test_override_needs_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["oops"])


# ---- sections and the flat form ----------------------------------------------------------------
FLAT = REPO_ROOT / "tests" / "training" / "flat_recipes"  # recipes as they were before sections


@pytest.mark.parametrize("flat", sorted(FLAT.glob("*.yaml")), ids=lambda p: p.name)
def test_an_old_flat_recipe_loads_as_its_sectioned_successor(flat):
    successor = next((REPO_ROOT / "recipes").rglob(flat.name))
    with pytest.warns(FutureWarning, match="dclr config convert"):
        old = load_config(flat)
    assert old.to_dict() == load_config(successor).to_dict()


def test_dclr_shows_the_flat_recipe_warning_and_convert_does_not(tmp_path):
    """Python hides a DeprecationWarning outside __main__: the flat-recipe warning was never
    seen. It is a FutureWarning, one `warning:` line; `config convert` (its fix) stays quiet."""
    import subprocess
    import sys

    flat = sorted(FLAT.glob("*.yaml"))[0]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}  # Python's defaults
    shown = subprocess.run([sys.executable, "-m", "dclr", "config", "show", str(flat)],
                           capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"warning: {flat} is a flat recipe" in shown.stderr
    assert "FutureWarning" not in shown.stderr  # dclr's one-line form, not Python's
    converted = subprocess.run([sys.executable, "-m", "dclr", "config", "convert", str(flat)],
                               capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert converted.returncode == 0 and "flat recipe" not in converted.stderr


def test_dotted_and_flat_overrides_reach_the_same_field():
    recipe = REPO_ROOT / "recipes" / "dclr_minilm_cpu.yaml"
    dotted = load_config(recipe, {"optimisation.learning_rate": 1e-5, "dclr.noise_ratio": 0.5})
    flat = load_config(recipe, {"learning_rate": 1e-5, "noise_ratio": 0.5})
    assert dotted.to_dict() == flat.to_dict()
    assert dotted.optimisation.learning_rate == 1e-5 and dotted.section("dclr").noise_ratio == 0.5


def test_an_option_of_another_method_is_refused():
    with pytest.raises(ConfigError, match="unknown option"):
        load_config(REPO_ROOT / "recipes" / "simcse_minilm_cpu.yaml", {"noise_ratio": 0.5})


def test_the_saved_config_round_trips(tmp_path):
    config = load_config(REPO_ROOT / "recipes" / "consert_joint_snli_minilm_cpu.yaml")
    config.save(tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml").to_dict() == config.to_dict()


# The flat format's defaults as they were written by hand before the sections held them (kept
# here, literally, so a changed section default that would silently re-read old configs fails).
HISTORICAL_FLAT_DEFAULTS = {
    "noise_ratio": 1.0, "noise_std": 1.0, "noise_steps": 4, "noise_step_size": 1e-3,
    "noise_temperature": None, "noise_mode": "optimized", "false_negative_threshold": 0.9,
    "weighting": "complementary", "dclr_form": "paper", "complementary_model": None,
    "complementary_pooler": None, "complementary_mode": "cached", "complementary_cache": None,
    "view1": "dropout", "view1_rate": 0.0, "view2": "dropout", "view2_rate": 0.0,
    "schedule": "unsup", "supervised_loss": "simcse", "nli_data": None, "nli_split": "train",
    "joint_weight": 1.0, "adversarial_epsilon": 0.0, "corpus": "sts", "mlp_head": True,
    "encoder": "cross", "contradiction_negatives": True, "intra_sentence": True,
    "sup_positives": "both", "rte_eval": True, "eval_batch_size": 128, "temperature": 0.05,
    "phi_calibration": "none", "phi_calibration_target": 0.001,
    "paraphrase_density": 0.0, "paraphrase_sources": "mrpc,stsb,sick",
}  # fmt: skip


def test_the_flat_defaults_are_read_from_the_sections_and_equal_the_historical_ones():
    import dataclasses

    from dclr.flat_recipe import FLAT_ONLY_DEFAULTS, LEGACY_DEFAULTS, legacy_defaults
    from dclr.methods.registry import builtin_sections
    from dclr.options.config import CORE_SECTIONS

    assert legacy_defaults() == LEGACY_DEFAULTS == HISTORICAL_FLAT_DEFAULTS
    # The flat format had one default per name; a section that declares a flat option agrees
    # with it, or differs on purpose and the conversion writes the flat one in (a flat consert
    # recipe keeps tau 0.05: tests/methods/test_option_defaults.py).
    differ = {
        (cls.__name__, item.name)
        for cls in [*builtin_sections().values(), *CORE_SECTIONS.values()]
        for item in dataclasses.fields(cls)
        if item.name in LEGACY_DEFAULTS and item.name not in FLAT_ONLY_DEFAULTS
        and item.default != LEGACY_DEFAULTS[item.name]
    }  # fmt: skip
    assert differ == {("ConSERTSection", "temperature")}  # the paper's 0.1 (ConSERTOptions)
