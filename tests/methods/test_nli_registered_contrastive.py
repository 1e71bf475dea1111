"""NLI's contrastive part (`nli.contrastive`) is found through the method registry, like every
method: a contrastive method registered at run time, as an installed package's entry point is
(`dclr.methods.registry`), is the joint objective's contrastive part and the second stage's method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from helpers import pseudo_sentence, write_pseudo_corpus
from torch import nn

from dclr.contract import Batch
from dclr.driver import resolve, trainer_for
from dclr.errors import ConfigError
from dclr.losses.simcse import SimCSELoss
from dclr.methods.registry import register, unregister
from dclr.methods.simcse import ContrastiveMethod
from dclr.options.contrastive import ContrastiveSection
from dclr.recipe import load_config
from dclr.training.tracking import read_metrics

LABELS = ["entailment", "neutral", "contradiction"]


@dataclass
class ScaledSection(ContrastiveSection):
    scale: float = 1.0  # multiplies SimCSE's loss

    def validate(self, config) -> None:
        super().validate(config)
        if not self.scale > 0:
            raise ConfigError(f"scale must be > 0, got {self.scale}")


class Scaled(nn.Module):
    def __init__(self, loss: nn.Module, scale: float) -> None:
        super().__init__()
        self.loss, self.scale = loss, scale

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        parts = self.loss(batch)
        return {**parts, "loss": self.scale * parts["loss"]}


class ScaledSimCSE(ContrastiveMethod):
    """SimCSE times a scale: a contrastive method dclr does not ship."""

    name = "scaled_simcse"
    section = ScaledSection
    supports_grad_cache = False  # `Scaled` has no `objective(z1, z2, batch)`

    def __init__(self) -> None:
        self.built: list[float] = []  # the scale of every loss this method built

    def loss_module(self, config, model, section, complementary) -> nn.Module:
        self.built.append(section.scale)
        return Scaled(SimCSELoss(model, temperature=section.temperature), section.scale)


@pytest.fixture
def scaled():
    method = register(ScaledSimCSE())
    yield method
    unregister(method.name)


@pytest.fixture(scope="module")
def nli_folder(tmp_path_factory):
    """12 premises with one hypothesis per label, SentEval's s1/s2/labels layout."""
    gen = torch.Generator().manual_seed(0)
    rows = [(pseudo_sentence(gen, 3, 9), label) for _ in range(12) for label in LABELS]
    s1 = [premise for premise, _ in rows]
    s2 = [pseudo_sentence(gen, 3, 9) for _ in rows]
    folder = tmp_path_factory.mktemp("data") / "SNLI"
    folder.mkdir()
    for name, lines in (("s1", s1), ("s2", s2), ("labels", [label for _, label in rows])):
        (folder / f"{name}.train").write_text("\n".join(lines) + "\n")
    return folder


def joint_config(model_dir, nli_folder, out, schedule="joint", **options):
    return load_config(
        None,
        {
            "method": "nli",
            "nli.schedule": schedule,
            "model.name": str(model_dir),
            "optimisation.batch_size": 8,
            "optimisation.max_steps": 2,
            "run.eval_steps": 0,
            "run.log_steps": 1,
            "run.test_eval": False,
            "run.output_dir": str(out),
            "nli.supervised_loss": "nli_head",
            "nli.nli_data": str(nli_folder),
            "nli.joint_weight": 0.5,
            **options,
        },
    )


def test_a_registered_contrastive_method_is_the_joint_objectives_part(
    scaled, tiny_dropout_model_dir, nli_folder, tmp_path
):
    config = joint_config(
        tiny_dropout_model_dir, nli_folder, tmp_path / "j",
        **{"nli.contrastive": "scaled_simcse", "scaled_simcse.scale": 3.0},
    )  # fmt: skip
    assert config.section("scaled_simcse").scale == 3.0
    trainer_for(config).train()
    assert scaled.built == [3.0]  # the registered method built the contrastive part
    rows = [r for r in read_metrics(tmp_path / "j", "train")]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert math.isfinite(row["contrastive"])
        assert row["loss"] == pytest.approx(row["classification"] + 0.5 * row["contrastive"], 1e-5)


def test_a_registered_contrastive_method_trains_the_second_stage(
    scaled, tiny_dropout_model_dir, nli_folder, tmp_path
):
    corpus = write_pseudo_corpus(tmp_path / "corpus.txt", 32, seed=1)
    config = joint_config(
        tiny_dropout_model_dir, nli_folder, tmp_path / "two", schedule="joint_then_unsup",
        **{"nli.contrastive": "scaled_simcse", "data.corpus": str(corpus)},
    )  # fmt: skip
    method, runs = resolve(config)
    assert [(stage.method, plugin.name) for stage, plugin in runs] == [
        ("nli", "nli"),
        ("scaled_simcse", "scaled_simcse"),
    ]
    assert runs[1][1] is scaled


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"nli.contrastive": "nope"}, "unknown method 'nope'"),
        ({"nli.contrastive": "dualcse"}, "not a contrastive method"),
        # the part's section judges itself as a part (`validate_as_part`), NLI reads no DCLR option
        (
            {"nli.schedule": "sup_then_unsup", "nli.contrastive": "dclr",
             "dclr.weighting": "complementary", "dclr.phi_calibration": "random_pairs"},
            "phi_calibration derives phi",
        ),
    ],
)  # fmt: skip
def test_nli_contrastive_must_name_a_contrastive_method(options, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        joint_config("m", tmp_path, tmp_path / "x", **options)
