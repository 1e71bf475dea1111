"""The INLI methods' options (`dualcse:`, `simcse_sup:` in a recipe), declared once and
torch-free, so `dclr train --help` lists them without importing torch. The methods are
`dclr.methods.dualcse`.

`DualCSEOptions` is what DualCSE's objective takes (`dclr.losses.dualcse.DualCSELoss`) and what
the `dualcse:` section extends (`DualCSESection` adds the encoder kind and the INLI run's
options), so the two cannot drift. Field comments are the documentation.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

from dclr.errors import ConfigError

if TYPE_CHECKING:
    from dclr.options.config import TrainConfig

EncoderKind = Literal["cross", "bi"]  # cross: one encoder and a prompt word; bi: two encoders
SupPositives = Literal["both", "explicit", "implied"]
MIN_LENGTH = 8  # room for [CLS] s [SEP] prompt [SEP] with s non-empty
PAPER_TEMPERATURE = 0.05  # tau of every InfoNCE term in both INLI methods (DualCSE paper)


def _check_temperature(temperature: float) -> float:
    """tau > 0, else a ConfigError; returns it."""
    if not temperature > 0:
        raise ConfigError(f"temperature must be > 0, got {temperature}")
    return temperature


@dataclass
class DualCSEOptions:
    """The numbers and switches of DualCSE's objective (the paper's ablations turn the two
    switches off; `dclr.losses.dualcse.dualcse_loss` says what each term is)."""

    temperature: float = PAPER_TEMPERATURE  # tau of every InfoNCE term (paper: 0.05)
    contradiction_negatives: bool = True  # contradictions as negatives + their intra term
    intra_sentence: bool = True  # the three r/u terms within a hypothesis

    def check_options(self) -> None:
        """Every value in range; a ConfigError naming the option otherwise."""
        _check_temperature(self.temperature)

    def loss_options(self) -> DualCSEOptions:
        """Just the objective's options (a section subclass carries more)."""
        return DualCSEOptions(**{f.name: getattr(self, f.name) for f in fields(DualCSEOptions)})


@dataclass
class INLISection:
    """Options shared by the INLI methods' runs."""

    rte_eval: bool = True  # after training: RTE threshold on INLI val, accuracies on INLI test
    eval_batch_size: int = 128  # sentences per forward pass when evaluating

    def validate(self, config: TrainConfig) -> None:
        if config.model.max_length < MIN_LENGTH:
            raise ConfigError(f"max_length must be >= {MIN_LENGTH}, got {config.model.max_length}")
        if self.eval_batch_size < 1:
            raise ConfigError("eval_batch_size must be >= 1")


@dataclass
class DualCSESection(INLISection, DualCSEOptions):
    """`dualcse:` in a recipe: the objective's options (`DualCSEOptions`), the encoder kind and
    the INLI run's options. Field comments are the documentation."""

    encoder: EncoderKind = "cross"  # cross (one encoder, prompt word) | bi (two encoders)

    def validate(self, config: TrainConfig) -> None:
        self.check_options()
        super().validate(config)  # INLISection: max_length, eval_batch_size


@dataclass
class SupervisedINLISection(INLISection):
    """Supervised SimCSE on INLI: premise anchor, entailment positive, contradiction negative."""

    temperature: float = PAPER_TEMPERATURE  # tau of the supervised InfoNCE (paper: 0.05)
    sup_positives: SupPositives = "both"  # entailments used as positives (both: 2 triples)

    def validate(self, config: TrainConfig) -> None:
        _check_temperature(self.temperature)
        super().validate(config)
