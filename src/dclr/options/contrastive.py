"""The options of the two-view contrastive methods (SimCSE, ConSERT), declared once and torch-free.

Each method's objective options are one dataclass, as DCLR's are (`dclr.options.dclr`):
`SimCSEOptions` is what `dclr.losses.simcse.SimCSELoss` defaults to, `ConSERTOptions` what
`dclr.losses.consert.ConSERTLoss` and the sentence-transformers face `dclr.st.ConSERTLoss` default
to; the recipe sections extend them with the two positive views (`ContrastiveSection` is the
`simcse:` section and the base of ConSERT's and DCLR's; `ConSERTSection` is `consert:`), so a
default cannot differ between `dclr train`, the loss and the ST face. `dclr train --help` lists
the fields without importing torch. Checks that need another method's options (an adversarial
view needs NLI labels) are the methods' own (`ContrastiveMethod.validate`, `NLI.validate`); what a
section refuses as another method's part is its `validate_as_part`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dclr.errors import ConfigError
from dclr.views.strategies import ViewStrategy, check_view

if TYPE_CHECKING:
    from dclr.options.config import TrainConfig


@dataclass
class SimCSEOptions:
    """The number of SimCSE's objective (Gao et al. 2021): InfoNCE's tau."""

    temperature: float = 0.05  # tau of the contrastive loss (SimCSE: 0.05)


@dataclass
class ConSERTOptions(SimCSEOptions):
    """The number of ConSERT's objective (Yan et al. 2021): NT-Xent's tau, the paper's best.

    ../shared/papers/consert.txt l.93 (Sec. 5.5, Influence of Temperature): "The optimal NT-Xent
    temperature is 0.1, with the best range approximately 0.08–0.12."
    """

    temperature: float = 0.1  # tau of NT-Xent (ConSERT Sec. 5.5: 0.1)


@dataclass
class ContrastiveSection(SimCSEOptions):
    """Options of a two-view contrastive objective (`simcse:`; the base of ConSERT's and DCLR's
    sections): tau and the two positive views. Field comments are the documentation."""

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

    @property
    def needs_complementary(self) -> bool:
        """Whether the objective scores pairs with a frozen complementary model (DCLR's
        weightings); none of SimCSE's or ConSERT's does."""
        return False

    def validate_as_part(self, config: TrainConfig) -> None:
        """Checks of these options when they configure part of another method's objective (NLI's
        `nli.contrastive`), after `validate`: what only this method's own run can do is refused
        here (DCLR's phi calibration)."""


ADVERSARIAL_NEEDS_LABELS = (
    "view 'adversarial' is computed from the supervised loss and needs labels: use it with "
    "schedule: joint (NLI pairs)"
)


@dataclass
class ConSERTSection(ConSERTOptions, ContrastiveSection):
    """`consert:` in a recipe: ConSERT's tau (`ConSERTOptions`, 0.1 unless the recipe says
    otherwise) and the two views. A flat (pre-sections) recipe trained at the flat format's 0.05:
    `dclr.flat_recipe` writes that value in when converting one that omits it."""
