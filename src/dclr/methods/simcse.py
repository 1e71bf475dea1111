"""Unsupervised SimCSE (Gao et al., 2021) as a method: two views of each sentence, InfoNCE.

Its section, `ContrastiveSection` (temperature + the two positive views, declared torch-free in
`dclr.options.contrastive`), is shared by the other view-based methods (ConSERT, DCLR),
which subclass it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from dclr import distributed as dist
from dclr.errors import ConfigError
from dclr.losses.simcse import SimCSELoss
from dclr.methods.base import Method
from dclr.options.contrastive import ADVERSARIAL_NEEDS_LABELS, ContrastiveSection
from dclr.views.pair import PositiveViews, ViewSpec

if TYPE_CHECKING:
    from dclr.contract import PreparedRun
    from dclr.options.config import TrainConfig


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

    def validate(self, config: TrainConfig) -> None:
        """An adversarial view needs NLI labels (method `nli`, schedule `joint`)."""
        if config.section(self.name).adversarial:
            raise ConfigError(ADVERSARIAL_NEEDS_LABELS)

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

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module:
        return self.loss_module(run.config, model, run.config.section(self.name), None)


class SimCSE(ContrastiveMethod):
    name = "simcse"
    title = "unsupervised SimCSE (Gao et al., EMNLP 2021)"
    label = "SimCSE"
    section = ContrastiveSection
    loss_class = SimCSELoss


SIMCSE = SimCSE()
