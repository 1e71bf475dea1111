"""Recipes and option validation."""

import pytest
from helpers import REPO_ROOT

from dclr.errors import ConfigError
from dclr.training.config import TrainConfig, load_config, parse_overrides

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
            ]
        ),
    )
    assert config.max_steps == 7 and config.learning_rate == 1e-5
    assert config.dropout is None and config.mlp_head is False


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
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_invalid_options_are_rejected_with_a_reason(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, {"model": "m", **override})


def test_override_needs_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["oops"])
