"""The INLI methods' options (`dualcse:`, `simcse_sup:` in a recipe), declared once and
torch-free, so `dclr train --help` lists them without importing torch. The methods are
`dclr.methods.dualcse`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dclr.errors import ConfigError

if TYPE_CHECKING:
    from dclr.training.config import TrainConfig

EncoderKind = Literal["cross", "bi"]  # cross: one encoder and a prompt word; bi: two encoders
SupPositives = Literal["both", "explicit", "implied"]
MIN_LENGTH = 8  # room for [CLS] s [SEP] prompt [SEP] with s non-empty


@dataclass
class INLISection:
    """Options shared by the INLI methods."""

    temperature: float = 0.05  # tau of every InfoNCE term (paper: 0.05)
    rte_eval: bool = True  # after training: RTE threshold on INLI val, accuracies on INLI test
    eval_batch_size: int = 128  # sentences per forward pass when evaluating

    def validate(self, config: TrainConfig) -> None:
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if config.model.max_length < MIN_LENGTH:
            raise ConfigError(f"max_length must be >= {MIN_LENGTH}, got {config.model.max_length}")
        if self.eval_batch_size < 1:
            raise ConfigError("eval_batch_size must be >= 1")


@dataclass
class DualCSESection(INLISection):
    """DualCSE's options. Field comments are the documentation."""

    encoder: EncoderKind = "cross"  # cross (one encoder, prompt word) | bi (two encoders)
    contradiction_negatives: bool = True  # contradictions as negatives + their intra term
    intra_sentence: bool = True  # the three r/u terms within a hypothesis


@dataclass
class SupervisedINLISection(INLISection):
    """Supervised SimCSE on INLI: premise anchor, entailment positive, contradiction negative."""

    sup_positives: SupPositives = "both"  # entailments used as positives (both: 2 triples)
