"""DCLR's options, declared once and torch-free.

`DCLROptions` is what the objective takes (`dclr.losses.dclr.DCLRLoss`), what `dclr train`'s
`dclr:` section extends (`DCLRSection` adds the two positive views, the complementary model, its
cache and the phi calibration, which decide *where* the scores come from), and what the
sentence-transformers face builds from its keyword arguments (`dclr.st.DCLRLoss`), so the three
cannot drift. Field comments are the documentation (`dclr train --help` lists the fields).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal, get_args

from dclr.errors import ConfigError
from dclr.models.pooler_names import POOLERS, PoolerName
from dclr.options.contrastive import ContrastiveSection

if TYPE_CHECKING:
    from dclr.options.config import TrainConfig

LossForm = Literal["paper", "official"]
NoiseMode = Literal["optimized", "random", "none"]
# how the ascent takes L_U's gradient: auto = closed_form on a GPU, autograd elsewhere (the same
# ascent up to float rounding; autograd is what the recorded CPU trajectories computed)
NoiseGradient = Literal["auto", "autograd", "closed_form"]
# what the noise ascends: auto = the loss form's (paper: L_U, dclr.txt Knowl 2; official: the
# released code's cross-entropy over each row's in-batch and noise logits, docs/dclr-loss-forms.md)
NoiseObjective = Literal["auto", "paper", "released"]
Weighting = Literal["complementary", "self", "none", "distill"]
ComplementaryMode = Literal["cached", "on_the_fly", "two_views"]
ComplementaryRows = Literal["auto", "all", "sampled"]
# how noise negatives are weighted (dclr.txt l.94: alpha for "any negative"; docs/dclr-loss-forms.md)
NoiseWeighting = Literal["none", "complementary"]
NEEDS_SCORER = ("complementary", "distill")  # weightings that need a complementary model
# where phi comes from: as set, or calibrated on the complementary model (dclr.losses.calibration)
PhiCalibration = Literal["none", "random_pairs", "paraphrase_recall"]
# which in-batch negatives count as false: fixed (complementary cosine >= phi, the paper) or,
# per anchor, relative to the complementary model's anchor-positive cosine g_ii, as
# sentence-transformers' GISTEmbedLoss masks: pair_absolute drops cos > g_ii - margin,
# pair_relative drops cos > g_ii - |g_ii| * margin (strict `>`, as GIST)
FalseNegativeRule = Literal["fixed", "pair_absolute", "pair_relative"]


@dataclass
class DCLROptions:
    """The numbers and choices of DCLR's objective (paper values for BERT-base)."""

    temperature: float = 0.05  # tau of the contrastive loss
    noise_ratio: float = 1.0  # k = round(ratio * batch_size) noise negatives
    noise_std: float = 1.0  # sigma of the Gaussian the noise starts from
    noise_steps: int = 4  # t gradient-ascent steps on the non-uniformity loss
    noise_step_size: float = 1e-3  # beta, the size of each normalised step
    noise_temperature: float | None = None  # tau_u of the non-uniformity loss (None: temperature)
    noise_mode: NoiseMode = "optimized"  # optimized | random (t = 0) | none
    noise_gradient: NoiseGradient = "auto"  # auto | autograd | closed_form (dclr.losses.dclr)
    # auto (the form's: paper -> paper, official -> released) | paper (L_U) | released
    noise_objective: NoiseObjective = "auto"
    false_negative_threshold: float = 0.9  # phi: complementary cosine >= phi -> weight 0
    weighting: Weighting = "complementary"  # complementary | self | none | distill
    # none: noise negatives always kept (released code); complementary: alpha = 0 where
    # cos(h_i^C, noise) >= phi, the paper's "any negative" (dclr.txt l.94; docs/dclr-loss-forms.md)
    noise_weighting: NoiseWeighting = "none"
    dclr_form: LossForm = "paper"  # paper equations, or what the official code computes
    # fixed (phi above) | pair_absolute | pair_relative (per anchor, from its own positive's
    # complementary cosine and pair_margin; GISTEmbedLoss's margin_strategy; phi is not used)
    false_negative_rule: FalseNegativeRule = "fixed"
    pair_margin: float = 0.0  # the margin of the pair rules (GIST's default: 0)

    def check_options(self) -> None:
        """Every value in range and every combination the objective implements; a ConfigError
        naming the option otherwise."""
        for name, choices in _LITERALS.items():
            if getattr(self, name) not in choices:
                raise ConfigError(
                    f"{name} must be one of {', '.join(choices)}, got {getattr(self, name)!r}"
                )
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")
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
        if self.dclr_form == "official" and self.weighting not in ("complementary", "none"):
            raise ConfigError("the official form implements complementary weighting only")
        if self.false_negative_rule != "fixed":
            if self.weighting != "complementary" or self.dclr_form != "paper":
                raise ConfigError(
                    f"false_negative_rule: {self.false_negative_rule} compares each negative "
                    "with its anchor's positive under the complementary model: it needs "
                    "weighting: complementary and dclr_form: paper"
                )
            if self.noise_weighting != "none":
                raise ConfigError(
                    f"false_negative_rule: {self.false_negative_rule} has no positive to compare "
                    "a noise negative with: use noise_weighting: none"
                )
            if not 0 <= self.pair_margin <= 2:
                raise ConfigError(f"pair_margin must be in [0, 2], got {self.pair_margin}")
        if self.noise_weighting == "complementary" and (
            self.weighting != "complementary" or self.dclr_form != "paper"
        ):
            raise ConfigError(
                "noise_weighting: complementary scores noise negatives with the complementary "
                "model: it needs weighting: complementary and dclr_form: paper (the released "
                "code never weights noise negatives)"
            )

    @property
    def ascent_objective(self) -> str:
        """What the noise ascends on: `noise_objective`, or for auto the loss form's own."""
        if self.noise_objective != "auto":
            return self.noise_objective
        return "released" if self.dclr_form == "official" else "paper"

    @property
    def needs_complementary(self) -> bool:
        return self.weighting in NEEDS_SCORER

    def loss_options(self) -> DCLROptions:
        """Just the objective's options (a section subclass carries more)."""
        return DCLROptions(**{f.name: getattr(self, f.name) for f in fields(DCLROptions)})


_LITERALS: dict[str, tuple[str, ...]] = {
    "noise_mode": get_args(NoiseMode),
    "noise_gradient": get_args(NoiseGradient),
    "noise_objective": get_args(NoiseObjective),
    "weighting": get_args(Weighting),
    "noise_weighting": get_args(NoiseWeighting),
    "dclr_form": get_args(LossForm),
    "false_negative_rule": get_args(FalseNegativeRule),
}


def option_names() -> list[str]:
    """The objective's option names, in declaration order."""
    return [f.name for f in fields(DCLROptions)]


def check_target(mode: str, target: float) -> float:
    """A calibration's target (a dropped share or a recall) in (0, 1); ConfigError otherwise."""
    if mode != "none" and not 0 < target < 1:
        raise ConfigError(f"phi_calibration_target must be in (0, 1) for {mode!r}, got {target}")
    return target


PHI_CALIBRATION_NEEDS = (
    "phi_calibration derives phi from the complementary model: it needs method: dclr with "
    "weighting: complementary"
)


@dataclass
class DCLRSection(DCLROptions, ContrastiveSection):
    """`dclr:` in a recipe: the objective's options (`DCLROptions`), the two positive views, and
    where the complementary model's scores come from. Field comments are the documentation."""

    complementary_model: str | None = None  # frozen scorer (None: the starting model itself)
    complementary_pooler: PoolerName | None = None  # its pooler (None: what its folder records)
    complementary_mode: ComplementaryMode = "cached"  # cached | on_the_fly | two_views
    complementary_cache: str | None = None  # .npy path (None: ~/.cache/dclr/complementary/<key>)
    # cached mode: all (every corpus row, on disk, shared by later runs) | sampled (only the rows
    # this run's batches hold, in memory: same vectors, same trajectory) | auto (sampled when the
    # steps x batch cover under half the corpus and no whole-corpus cache exists yet)
    complementary_rows: ComplementaryRows = "auto"
    phi_calibration: PhiCalibration = "none"  # none (phi as set) | random_pairs | paraphrase_recall
    phi_calibration_target: float = 0.001  # random_pairs: q dropped; paraphrase_recall: r of pairs

    def validate(self, config: TrainConfig) -> None:
        super().validate(config)  # ContrastiveSection: temperature, the views
        self.check_options()
        if self.complementary_pooler is not None and self.complementary_pooler not in POOLERS:
            raise ConfigError(f"unknown complementary_pooler {self.complementary_pooler!r}")
        check_target(self.phi_calibration, self.phi_calibration_target)
        if self.complementary_rows not in get_args(ComplementaryRows):
            choices = ", ".join(get_args(ComplementaryRows))
            raise ConfigError(f"complementary_rows must be one of {choices}")
        if self.complementary_rows == "sampled" and self.complementary_mode != "cached":
            raise ConfigError("complementary_rows: sampled needs complementary_mode: cached")
        if self.phi_calibration != "none" and self.weighting != "complementary":
            raise ConfigError(PHI_CALIBRATION_NEEDS)
        if self.phi_calibration != "none" and self.false_negative_rule != "fixed":
            raise ConfigError(
                f"phi_calibration sets phi, which false_negative_rule: "
                f"{self.false_negative_rule} does not use: set phi_calibration: none"
            )

    def validate_as_part(self, config: TrainConfig) -> None:
        """phi calibration runs on `method: dclr`'s own corpus, before its own first step: as
        another method's part (NLI's contrastive objective) it is refused."""
        if self.phi_calibration != "none":
            raise ConfigError(PHI_CALIBRATION_NEEDS)
