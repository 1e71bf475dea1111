"""The options of the two-view contrastive methods (SimCSE, ConSERT), declared once and torch-free.

`ContrastiveSection` (tau and the two positive views) is the `simcse:` section and the base of
ConSERT's and DCLR's; `dclr train --help` lists its fields without importing torch. Checks that
need another method's options (an adversarial view needs NLI labels) are the methods' own
(`ContrastiveMethod.validate`, `NLI.validate`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dclr.errors import ConfigError
from dclr.views.strategies import ViewStrategy, check_view

if TYPE_CHECKING:
    from dclr.options.config import TrainConfig


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
        if self.view1 == self.view2 == "adversarial":
            raise ConfigError("only one view can be adversarial")
        if config.optimisation.grad_cache_chunk and not self.default_views:
            raise ConfigError("grad_cache_chunk supports the default dropout views only")

    @property
    def default_views(self) -> bool:
        return (self.view1, self.view2) == ("dropout", "dropout")

    @property
    def adversarial(self) -> bool:
        """Whether a view is adversarial (computed from a supervised loss: NLI joint only)."""
        return "adversarial" in (self.view1, self.view2)


ADVERSARIAL_NEEDS_LABELS = (
    "view 'adversarial' is computed from the supervised loss and needs labels: use it with "
    "schedule: joint (NLI pairs)"
)


@dataclass
class ConSERTSection(ContrastiveSection):
    """ConSERT's options: the two views and tau (ConSERT's own tau is 0.1; the default stays
    0.05 so a recipe that omits it trains as it always did)."""
