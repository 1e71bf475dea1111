"""Options of `dclr dualcse train`: one typed dataclass, loaded from a YAML recipe + overrides.

The same loop trains DualCSE (`method: dualcse`) and its single-embedding baseline, supervised
SimCSE on INLI (`method: simcse_sup`), so the two compare at equal budget. Recipes live in
`recipes/dualcse/`; the resolved config is saved in every run folder and checkpoint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from dclr.configfile import check_choices, from_dict, load
from dclr.dualcse.model import EncoderKind
from dclr.errors import ConfigError
from dclr.models.pooling import POOLERS

Method = Literal["dualcse", "simcse_sup"]
SupPositives = Literal["both", "explicit", "implied"]


@dataclass
class DualCSEConfig:
    """Every option of `dclr dualcse train`. Field comments are the documentation."""

    model: str = ""  # backbone: a local folder, a hub id or python-package:NAME
    method: Method = "dualcse"  # dualcse | simcse_sup (the single-embedding baseline)
    encoder: EncoderKind = "cross"  # dualcse: cross (one encoder, prompt word) | bi (two)
    pooler: str = "mean"  # mean | cls_before_pooler | cls | avg_first_last | avg_top2
    data_dir: str | None = None  # folder holding inli/ (or inli/ itself); else $DCLR_DATA_DIR
    # Tokens per input: 99% of INLI premise + prompt-word pairs fit in 72 MiniLM/BERT tokens.
    max_length: int = 80
    batch_size: int = 64  # premises per step (paper: 64 cross, 32 bi); simcse_sup: triples
    epochs: float = 1.0  # passes over INLI train (ignored when max_steps is set)
    max_steps: int | None = None  # stop after this many optimizer steps
    learning_rate: float = 5e-5  # paper: 5e-5 cross, 3e-5 bi
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0  # gradient clipping (the Hugging Face Trainer's default); 0: off
    warmup_ratio: float = 0.0  # linear decay from the start, as SimCSE
    temperature: float = 0.05  # tau of every InfoNCE term (paper: 0.05)
    dropout: float | None = None  # override hidden/attention dropout (None: the model's own)
    contradiction_negatives: bool = True  # dualcse: contradictions as negatives + their intra term
    intra_sentence: bool = True  # dualcse: the three r/u terms within a hypothesis
    sup_positives: SupPositives = (
        "both"  # simcse_sup: entailments used as positives (both: 2 triples)
    )
    seed: int = 42  # batches, dropout and initialisation
    save_steps: int = 100  # checkpoint every N steps (and at the end)
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    log_steps: int = 10  # write training metrics every N steps
    rte_eval: bool = True  # after training: RTE threshold on INLI val, accuracies on INLI test
    eval_batch_size: int = 128  # sentences per forward pass when evaluating
    output_dir: str = "runs/dualcse"  # run folder: config, metrics, checkpoints, final model
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes saved with the run

    def validate(self) -> DualCSEConfig:
        if not self.model:
            raise ConfigError(
                "`model` is required: a local model folder, hub id or python-package:"
            )
        check_choices(self, ("method", "encoder", "sup_positives"))
        if self.pooler not in POOLERS:
            raise ConfigError(f"unknown pooler {self.pooler!r}; choose from {', '.join(POOLERS)}")
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if self.batch_size < 2:
            raise ConfigError(
                f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}"
            )
        if self.max_length < 8:  # room for [CLS] s [SEP] prompt [SEP] with s non-empty
            raise ConfigError(f"max_length must be >= 8, got {self.max_length}")
        if not self.learning_rate > 0:
            raise ConfigError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ConfigError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.max_steps is None and not self.epochs > 0:
            raise ConfigError(f"epochs must be > 0, got {self.epochs}")
        if not 0 <= self.warmup_ratio < 1:
            raise ConfigError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.dropout is not None and not 0 <= self.dropout < 1:
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.max_grad_norm < 0:
            raise ConfigError(f"max_grad_norm must be >= 0, got {self.max_grad_norm}")
        if self.save_steps < 1 or self.log_steps < 1 or self.keep_checkpoints < 1:
            raise ConfigError("save_steps, log_steps and keep_checkpoints must be >= 1")
        if self.eval_batch_size < 1:
            raise ConfigError("eval_batch_size must be >= 1")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def config_from_dict(values: dict[str, Any], source: str = "config") -> DualCSEConfig:
    return from_dict(DualCSEConfig, values, source)


def load_dualcse_config(
    recipe: str | Path | None, overrides: dict[str, Any] | None = None
) -> DualCSEConfig:
    """Recipe YAML (may be None) + overrides -> validated DualCSEConfig."""
    return load(DualCSEConfig, recipe, overrides)
