"""Training configuration: one typed dataclass, loaded from a YAML recipe plus `key=value` overrides.

The resolved config is written into every run folder and every checkpoint.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from dclr.configfile import check_choices, from_dict, load
from dclr.configfile import parse_overrides as parse_overrides  # re-exported for callers
from dclr.errors import ConfigError
from dclr.losses.calibration import PhiCalibration, check_target
from dclr.models.pooling import POOLERS
from dclr.views.strategies import ViewStrategy, check_view

Method = Literal["simcse", "dclr", "consert"]
NoiseMode = Literal["optimized", "random", "none"]
Weighting = Literal["complementary", "self", "none", "distill"]
LossForm = Literal["paper", "official"]
ComplementaryMode = Literal["cached", "on_the_fly", "two_views"]
Packing = Literal["auto", "on", "off"]
Precision = Literal["fp32", "fp16", "bf16"]
EvalMetric = Literal["stsb", "stsb_sick"]
FewShotSampling = Literal["first", "random"]
Schedule = Literal["unsup", "sup", "joint", "sup_then_unsup", "joint_then_unsup"]
SupervisedLoss = Literal["simcse", "nli_head"]


@dataclass
class TrainConfig:
    """Every option of `dclr train`. Field comments are the `--help` text."""

    model: str = ""  # backbone: a local folder or a Hugging Face hub id
    method: Method = "simcse"  # training objective
    pooler: str = "cls"  # cls | cls_before_pooler | mean | avg_first_last | avg_top2
    mlp_head: bool = True  # SimCSE's dense+tanh head on [CLS], in training only (pooler cls)
    corpus: str = "sts"  # 'sts' (every STS/SICK sentence) or a text file, one sentence per line
    data_dir: str | None = None  # evaluation data root (holds senteval/); else $DCLR_DATA_DIR
    max_length: int = 32  # training tokens per sentence (SimCSE: 32)
    batch_size: int = 64  # global batch: sentences per step over all ranks
    epochs: float = 1.0  # passes over the corpus (ignored when max_steps is set)
    max_steps: int | None = None  # stop after this many optimizer steps
    learning_rate: float = 3e-5
    weight_decay: float = 0.0
    max_grad_norm: float = (
        1.0  # gradient clipping (the Hugging Face Trainer default SimCSE ran); 0: off
    )
    warmup_ratio: float = 0.0  # SimCSE: linear decay from the start, no warmup
    temperature: float = 0.05  # tau of InfoNCE
    dropout: float | None = None  # override hidden/attention dropout (None: the model's own)
    seed: int = 42
    eval_steps: int = 125  # evaluate on the dev sets every N steps (0: never)
    eval_metric: EvalMetric = "stsb"  # stsb: STS-B dev; stsb_sick: mean of STS-B and SICK dev
    save_steps: int | None = None  # checkpoint every N steps (default: eval_steps, else 100)
    keep_checkpoints: int = 2  # newest checkpoints kept on disk
    precision: Precision = "fp32"  # autocast on GPU; CPU always runs fp32
    grad_cache_chunk: int | None = None  # GradCache: encode the 2n views in chunks of this size
    packing: Packing = "auto"  # padding-free packed forwards (auto: on CPU; GPU untested here)
    log_steps: int = 10  # write training metrics every N steps
    test_eval: bool = True  # 7-task STS test table before and after training
    output_dir: str = "runs/latest"  # run folder: config, metrics, checkpoints, models
    # ---- DCLR (method: dclr); paper values for BERT-base ----
    noise_ratio: float = 1.0  # k = round(ratio * batch_size) noise negatives
    noise_std: float = 1.0  # sigma of the Gaussian the noise starts from
    noise_steps: int = 4  # t gradient-ascent steps on the non-uniformity loss
    noise_step_size: float = 1e-3  # beta, the size of each normalised step
    noise_temperature: float | None = None  # tau_u of the non-uniformity loss (None: temperature)
    noise_mode: NoiseMode = "optimized"  # optimized | random (t = 0) | none
    false_negative_threshold: float = 0.9  # phi: complementary cosine >= phi -> weight 0
    weighting: Weighting = "complementary"  # complementary | self | none | distill
    dclr_form: LossForm = "paper"  # paper equations, or what the official code computes
    complementary_model: str | None = None  # frozen scorer (None: the starting model itself)
    complementary_pooler: str | None = None  # its pooler (None: what its folder records)
    complementary_mode: ComplementaryMode = "cached"  # cached | on_the_fly | two_views
    complementary_cache: str | None = None  # .npy path (None: ~/.cache/dclr/complementary/<key>)
    phi_calibration: PhiCalibration = "none"  # none (phi as set) | random_pairs | paraphrase_recall
    phi_calibration_target: float = 0.001  # random_pairs: q dropped; paraphrase_recall: r of pairs
    # ---- paraphrase-dense batches (dclr.data.sampler; measures DCLR where false negatives exist) ----
    paraphrase_density: float = 0.0  # rho: share of each batch made of gold paraphrase pairs
    paraphrase_sources: str = "mrpc,stsb,sick"  # train-split gold pairs (dclr.data.paraphrases)
    # ---- positive views (dclr.views; ConSERT), for every method ----
    view1: ViewStrategy = "dropout"  # dropout | none | token_shuffle | token/span/feature_cutoff
    view1_rate: float = 0.0  # fraction cut by a cutoff view, in [0, 1)
    view2: ViewStrategy = "dropout"  # the second view's strategy (ConSERT best: feature_cutoff)
    view2_rate: float = 0.0
    # ---- few-shot training data (ConSERT: N sentences; DCLR: a fraction) ----
    few_shot_sentences: int | None = None  # train on N sentences of the corpus
    few_shot_fraction: float | None = None  # or on this fraction of it, in (0, 1]
    few_shot_sampling: FewShotSampling = "first"  # first N, or a random N drawn with `seed`
    # ---- supervised NLI training (SimCSE-supervised; ConSERT's schedules) ----
    schedule: Schedule = "unsup"  # unsup | sup | joint | sup_then_unsup | joint_then_unsup
    supervised_loss: SupervisedLoss = "simcse"  # sup: simcse (triples) | nli_head (u, v, |u-v|)
    nli_data: str | None = None  # SentEval NLI folder (s1/s2/labels.<split>) or SimCSE CSV
    nli_split: str = "train"  # split of a SentEval folder (SNLI here: dev, test)
    joint_weight: float = 1.0  # alpha in joint: L = L_nli_head + alpha * L_contrastive
    adversarial_epsilon: float = 0.0  # L2 size of the adversarial view (needs a supervised loss)
    extra: dict[str, Any] = field(default_factory=dict)  # free-form notes saved with the run

    def validate(self) -> TrainConfig:
        if not self.model:
            raise ConfigError("`model` is required: a local model folder or a hub id")
        if self.pooler not in POOLERS:
            raise ConfigError(f"unknown pooler {self.pooler!r}; choose from {', '.join(POOLERS)}")
        if self.mlp_head and self.pooler != "cls":
            raise ConfigError("mlp_head applies to pooler 'cls' only; set mlp_head: false")
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
        if self.batch_size < 2:
            raise ConfigError(
                f"batch_size must be >= 2 (in-batch negatives), got {self.batch_size}"
            )
        if self.max_length < 2:
            raise ConfigError(f"max_length must be >= 2, got {self.max_length}")
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
        if self.eval_steps < 0 or (self.save_steps is not None and self.save_steps < 1):
            raise ConfigError("eval_steps must be >= 0 and save_steps >= 1")
        if self.grad_cache_chunk is not None and self.grad_cache_chunk < 1:
            raise ConfigError(f"grad_cache_chunk must be >= 1, got {self.grad_cache_chunk}")
        if self.max_grad_norm < 0:
            raise ConfigError(f"max_grad_norm must be >= 0, got {self.max_grad_norm}")
        if self.keep_checkpoints < 1:
            raise ConfigError("keep_checkpoints must be >= 1")
        if not -1 <= self.false_negative_threshold <= 1:
            raise ConfigError(
                "false_negative_threshold (phi) is a cosine in [-1, 1], got "
                f"{self.false_negative_threshold}"
            )
        if self.noise_ratio < 0:
            raise ConfigError(f"noise_ratio must be >= 0, got {self.noise_ratio}")
        if self.noise_steps < 0:
            raise ConfigError(f"noise_steps (t) must be >= 0, got {self.noise_steps}")
        if not self.noise_std > 0:
            raise ConfigError(f"noise_std (sigma) must be > 0, got {self.noise_std}")
        if self.noise_temperature is not None and not self.noise_temperature > 0:
            raise ConfigError(f"noise_temperature must be > 0, got {self.noise_temperature}")
        if self.complementary_pooler is not None and self.complementary_pooler not in POOLERS:
            raise ConfigError(f"unknown complementary_pooler {self.complementary_pooler!r}")
        self._validate_debiasing()
        check_view(self.view1, self.view1_rate, "view1")
        check_view(self.view2, self.view2_rate, "view2")
        if "adversarial" in (self.view1, self.view2):
            if self.schedule != "joint":
                raise ConfigError(
                    "view 'adversarial' is computed from the supervised loss and needs labels: "
                    "use it with schedule: joint (NLI pairs)"
                )
            if self.view1 == self.view2:
                raise ConfigError("only one view can be adversarial")
            if not self.adversarial_epsilon > 0:
                raise ConfigError("an adversarial view needs adversarial_epsilon > 0")
        if self.schedule != "unsup" and not self.nli_data:
            raise ConfigError(f"schedule {self.schedule!r} needs nli_data (labelled NLI data)")
        if self.schedule in ("joint", "joint_then_unsup") and self.supervised_loss != "nli_head":
            raise ConfigError(
                "the joint schedules train the NLI head: set supervised_loss: nli_head"
            )
        if (
            self.schedule in ("joint", "joint_then_unsup")
            and self.method == "dclr"
            and self.weighting in ("complementary", "distill")
        ):
            raise ConfigError(
                "joint training with DCLR supports weighting 'self' or 'none' (the complementary "
                "model scores a fixed unlabelled corpus)"
            )
        if not self.joint_weight >= 0:
            raise ConfigError(f"joint_weight must be >= 0, got {self.joint_weight}")
        if not self.adversarial_epsilon >= 0:
            raise ConfigError(f"adversarial_epsilon must be >= 0, got {self.adversarial_epsilon}")
        if self.grad_cache_chunk and (self.view1, self.view2) != ("dropout", "dropout"):
            raise ConfigError("grad_cache_chunk supports the default dropout views only")
        if self.grad_cache_chunk and self.schedule != "unsup":
            raise ConfigError("grad_cache_chunk supports unsupervised training only")
        if self.few_shot_sentences is not None and self.few_shot_fraction is not None:
            raise ConfigError("set few_shot_sentences or few_shot_fraction, not both")
        if self.few_shot_sentences is not None and self.few_shot_sentences < 1:
            raise ConfigError(f"few_shot_sentences must be >= 1, got {self.few_shot_sentences}")
        if self.few_shot_fraction is not None and not 0 < self.few_shot_fraction <= 1:
            raise ConfigError(f"few_shot_fraction must be in (0, 1], got {self.few_shot_fraction}")
        check_choices(
            self,
            (
                "method",
                "precision",
                "eval_metric",
                "noise_mode",
                "weighting",
                "dclr_form",
                "complementary_mode",
                "packing",
                "few_shot_sampling",
                "schedule",
                "supervised_loss",
                "phi_calibration",
            ),
        )
        return self

    def _validate_debiasing(self) -> None:
        """Paraphrase-dense batches and calibrated phi (issue 12's options)."""
        from dclr.data.paraphrases import parse_sources
        from dclr.data.sampler import pairs_per_batch

        if not 0 <= self.paraphrase_density <= 1:
            raise ConfigError(
                f"paraphrase_density must be in [0, 1], got {self.paraphrase_density}"
            )
        if self.paraphrase_density > 0:
            if self.schedule != "unsup":
                raise ConfigError("paraphrase_density applies to unsupervised training only")
            pairs_per_batch(self.paraphrase_density, self.batch_size)
            parse_sources(self.paraphrase_sources)
        check_target(self.phi_calibration, self.phi_calibration_target)
        if self.phi_calibration != "none" and (
            self.method != "dclr" or self.weighting != "complementary"
        ):
            raise ConfigError(
                "phi_calibration derives phi from the complementary model: it needs "
                "method: dclr with weighting: complementary"
            )

    @property
    def checkpoint_every(self) -> int:
        return self.save_steps or self.eval_steps or 100

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))


def config_from_dict(values: dict[str, Any], source: str = "config") -> TrainConfig:
    return from_dict(TrainConfig, values, source)


def load_config(recipe: str | Path | None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Recipe YAML (may be None) + overrides -> validated TrainConfig."""
    return load(TrainConfig, recipe, overrides)
