"""Supervised NLI training's options (`nli:` in a recipe), declared once and torch-free, so
`dclr train --help` lists them without importing torch. The method is `dclr.methods.nli`.

`NLIOptions` is what the objective takes (`dclr.losses.supervised.SupervisedNLILoss` defaults to
its values) and what the `nli:` section extends (`NLISection` adds the schedule, the data and the
second stage), so the two cannot drift. The joint objective's contrastive part is configured by
that method's own section (`nli.contrastive: consert` reads `consert:`, with ConSERT's tau)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dclr.errors import ConfigError
from dclr.options.contrastive import ContrastiveSection

if TYPE_CHECKING:
    from dclr.options.config import TrainConfig

Schedule = Literal["sup", "joint", "sup_then_unsup", "joint_then_unsup"]
SupervisedLoss = Literal["simcse", "nli_head"]
# The supervised stage of each schedule (the two-stage ones add an unsupervised stage).
SUPERVISED_STAGE = {
    "sup": "sup",
    "joint": "joint",
    "sup_then_unsup": "sup",
    "joint_then_unsup": "joint",
}
TWO_STAGE = ("sup_then_unsup", "joint_then_unsup")


@dataclass
class NLIOptions:
    """The numbers of the supervised objective (`SupervisedNLILoss`)."""

    temperature: float = 0.05  # tau of supervised SimCSE (Gao et al. 2021: 0.05)
    # alpha in joint: L = L_nli_head + alpha * L_contrastive. 1.0 keeps older runs unchanged;
    # ConSERT's released scripts use 0.15 (`--cl_rate 0.15`), the paper-scale recipes too.
    joint_weight: float = 1.0


@dataclass
class NLISection(NLIOptions):
    """Supervised NLI options (SimCSE-supervised; ConSERT's schedules): the objective's
    (`NLIOptions`), the schedule, the labelled data and the second stage."""

    schedule: Schedule = "sup"  # sup | joint | sup_then_unsup | joint_then_unsup
    supervised_loss: SupervisedLoss = "simcse"  # sup: simcse (triples) | nli_head (u, v, |u-v|)
    nli_data: str | None = None  # SentEval NLI folder (s1/s2/labels.<split>) or SimCSE CSV
    nli_split: str = "train"  # split of a SentEval folder (SNLI here: dev, test)
    adversarial_epsilon: float = 0.0  # L2 size of the adversarial view (joint only)
    # the joint part / second stage: a contrastive method (simcse | consert | dclr, or one
    # installed or registered); its own section configures it
    contrastive: str = "simcse"
    # Stage 2 of sup_then_unsup / joint_then_unsup (None: stage 1's value). ConSERT's released
    # stage 2 trains 25 epochs at lr 5e-7 after a stage 1 at 2e-5 for 1 epoch.
    second_stage_learning_rate: float | None = None
    second_stage_epochs: float | None = None  # stage 2 counts epochs (stage 1's max_steps dropped)

    def validate(self, config: TrainConfig) -> None:
        if not self.nli_data:
            raise ConfigError(f"schedule {self.schedule!r} needs nli_data (labelled NLI data)")
        if self.schedule in ("joint", "joint_then_unsup") and self.supervised_loss != "nli_head":
            raise ConfigError(
                "the joint schedules train the NLI head: set supervised_loss: nli_head"
            )
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if not self.joint_weight >= 0:
            raise ConfigError(f"joint_weight must be >= 0, got {self.joint_weight}")
        for name in ("second_stage_learning_rate", "second_stage_epochs"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name} must be > 0, got {value}")
            if value is not None and self.schedule not in TWO_STAGE:
                raise ConfigError(
                    f"{name} applies to the two-stage schedules ({', '.join(TWO_STAGE)}), "
                    f"not {self.schedule!r}"
                )
        if not self.adversarial_epsilon >= 0:
            raise ConfigError(f"adversarial_epsilon must be >= 0, got {self.adversarial_epsilon}")
        views = config.section(self.contrastive)
        if not isinstance(views, ContrastiveSection):
            raise ConfigError(
                f"nli.contrastive: {self.contrastive!r} is not a contrastive method (its section "
                f"{type(views).__name__} is no ContrastiveSection: tau and two positive views)"
            )
        if views.adversarial and not self.adversarial_epsilon > 0:
            raise ConfigError("an adversarial view needs adversarial_epsilon > 0")
        if self.schedule in ("joint", "joint_then_unsup") and views.needs_complementary:
            raise ConfigError(
                "joint training with DCLR supports weighting 'self' or 'none' (the complementary "
                "model scores a fixed unlabelled corpus)"
            )
