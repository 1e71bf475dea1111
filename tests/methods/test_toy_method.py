"""A method defined and registered in this file alone (no package edit) trains through the one loop.

The toy: an alignment objective (pull two dropout views of a sentence together) with a scale
option in its own config section — what docs/adding-a-method.md walks through.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from helpers import make_tiny_model_dir, write_pseudo_corpus
from torch import nn

from dclr.contract import Batch
from dclr.driver import trainer_for
from dclr.errors import ConfigError
from dclr.methods.base import Method
from dclr.methods.registry import get_method, register, unregister
from dclr.recipe import load_config
from dclr.training.tracking import read_metrics


@dataclass
class ToySection:
    scale: float = 1.0  # multiplies the loss

    def validate(self, config) -> None:
        if not self.scale > 0:
            raise ConfigError(f"scale must be > 0, got {self.scale}")


class ToyObjective(nn.Module):
    def __init__(self, model: nn.Module, scale: float) -> None:
        super().__init__()
        self.model, self.scale = model, scale

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        features = batch.features
        z1, z2 = self.model(**features), self.model(**features)  # two dropout views, (n, d)
        distance = (torch.nn.functional.normalize(z1) - torch.nn.functional.normalize(z2)).pow(2)
        alignment = distance.sum(dim=1).mean()
        return {"loss": self.scale * alignment, "alignment": alignment.detach()}


class Toy(Method):
    name = "toy_alignment"
    section = ToySection

    def build_objective(self, run, model) -> nn.Module:
        return ToyObjective(model, run.config.section(self.name).scale)


@pytest.fixture
def toy():
    register(Toy())
    yield
    unregister("toy_alignment")


def test_a_toy_method_registered_here_trains_two_steps(toy, tmp_path):
    model = make_tiny_model_dir(tmp_path / "model")
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 32)
    config = load_config(
        None,
        {
            "method": "toy_alignment",
            "model.name": str(model),
            "model.pooler": "mean",
            "model.mlp_head": False,
            "data.corpus": str(corpus),
            "optimisation.batch_size": 4,
            "optimisation.max_steps": 2,
            "run.eval_steps": 0,
            "run.log_steps": 1,
            "run.test_eval": False,
            "run.output_dir": str(tmp_path / "run"),
            "toy_alignment.scale": 2.0,
        },
    )
    assert get_method(config.method).name == "toy_alignment"
    assert config.section("toy_alignment").scale == 2.0
    result = trainer_for(config).train()
    rows = read_metrics(tmp_path / "run", "train")
    assert result.steps == 2 and [r["step"] for r in rows] == [1, 2]
    assert all(r["loss"] == pytest.approx(2.0 * r["alignment"]) for r in rows)
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()
    saved = load_config(tmp_path / "run" / "config.yaml")  # the section is saved and reloads
    assert saved.section("toy_alignment").scale == 2.0


def test_the_toy_section_validates_itself(toy):
    with pytest.raises(ConfigError, match="scale must be > 0"):
        load_config(None, {"method": "toy_alignment", "model": "m", "toy_alignment.scale": 0})


def test_an_unknown_method_lists_the_registered_ones():
    with pytest.raises(ConfigError, match="choose from .*dclr.*dualcse.*simcse"):
        load_config(None, {"method": "no_such_method", "model": "m"})
