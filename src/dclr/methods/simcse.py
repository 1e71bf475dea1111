"""Unsupervised SimCSE (Gao et al., 2021) as a method: two views of each sentence, InfoNCE.

Its section, `ContrastiveSection` (temperature + the two positive views), is shared by the other
view-based methods (ConSERT, DCLR), which subclass it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dclr import distributed as dist
from dclr.errors import ConfigError
from dclr.losses.simcse import SimCSELoss
from dclr.methods.base import Method
from dclr.views.pair import PositiveViews, ViewSpec
from dclr.views.strategies import ViewStrategy, check_view

if TYPE_CHECKING:
    from dclr.training.config import TrainConfig


@dataclass
class ContrastiveSection:
    """Options of a two-view contrastive objective. Field comments are the documentation."""

    temperature: float = 0.05  # tau of the contrastive loss (SimCSE: 0.05, ConSERT: 0.1)
    view1: ViewStrategy = "dropout"  # dropout | none | token_shuffle | token/span/feature_cutoff
    view1_rate: float = 0.0  # fraction cut by a cutoff view, in [0, 1)
    view2: ViewStrategy = "dropout"  # the second view's strategy (ConSERT best: feature_cutoff)
    view2_rate: float = 0.0

    def validate(self, config: TrainConfig) -> None:
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        check_view(self.view1, self.view1_rate, "view1")
        check_view(self.view2, self.view2_rate, "view2")
        if "adversarial" in (self.view1, self.view2):
            joint = config.method == "nli" and config.section("nli").schedule == "joint"
            if not joint:
                raise ConfigError(
                    "view 'adversarial' is computed from the supervised loss and needs labels: "
                    "use it with schedule: joint (NLI pairs)"
                )
            if self.view1 == self.view2:
                raise ConfigError("only one view can be adversarial")
        if config.optimisation.grad_cache_chunk and (self.view1, self.view2) != (
            "dropout",
            "dropout",
        ):
            raise ConfigError("grad_cache_chunk supports the default dropout views only")

    @property
    def default_views(self) -> bool:
        return (self.view1, self.view2) == ("dropout", "dropout")


def build_views(section: ContrastiveSection, seed: int, rank: int = 0) -> PositiveViews | None:
    """The configured positive views, or None for the default two dropout views."""
    if section.default_views:
        return None
    return PositiveViews(
        ViewSpec(section.view1, section.view1_rate),
        ViewSpec(section.view2, section.view2_rate),
        seed=seed,
        rank=rank,
    )


class ContrastiveMethod(Method):
    """A two-view method on an unlabelled corpus: `loss_class(model, temperature, views)`."""

    supports_grad_cache = True
    sentence_batches = True
    loss_class: type[nn.Module] = nn.Module

    def convert_flat(self, flat: dict[str, Any]) -> dict[str, Any]:
        """A flat config with `schedule: sup | joint | ...` trains supervised NLI: method `nli`
        with this method as its contrastive part (`schedule: unsup` is this method alone)."""
        schedule = flat.get("schedule", "unsup")
        if schedule == "unsup":
            return {k: v for k, v in flat.items() if k != "schedule"}
        return {**flat, "method": "nli", "contrastive": flat.get("method", self.name)}

    def loss_module(
        self, config: TrainConfig, model: Any, section: ContrastiveSection, complementary: Any
    ) -> nn.Module:
        """The loss around `model` with `section`'s tau and views (complementary: DCLR only)."""
        views = build_views(section, config.run.seed, dist.rank())
        return self.loss_class(model, temperature=section.temperature, views=views)

    def build_objective(
        self, config: TrainConfig, model: Any, data: Sequence[Any], device: torch.device
    ) -> nn.Module:
        return self.loss_module(config, model, config.section(self.name), None)


class SimCSE(ContrastiveMethod):
    name = "simcse"
    title = "unsupervised SimCSE (Gao et al., EMNLP 2021)"
    section = ContrastiveSection
    loss_class = SimCSELoss


SIMCSE = SimCSE()
