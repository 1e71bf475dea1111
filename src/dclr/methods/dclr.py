"""DCLR (Zhou et al., ACL 2022) as a method: SimCSE + noise-based negatives + instance weighting
by a frozen complementary model (see `dclr.losses.dclr`, docs/dclr-loss-forms.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dclr import distributed as dist
from dclr.errors import ConfigError
from dclr.losses.calibration import PhiCalibration, check_target
from dclr.losses.dclr import ComplementaryMode, LossForm, NoiseMode, NoiseWeighting, Weighting
from dclr.methods.simcse import ContrastiveMethod, ContrastiveSection, build_views
from dclr.models.pooling import POOLERS, PoolerName

if TYPE_CHECKING:
    from dclr.training.config import TrainConfig


@dataclass
class DCLRSection(ContrastiveSection):
    """DCLR's options (paper values for BERT-base). Field comments are the documentation."""

    noise_ratio: float = 1.0  # k = round(ratio * batch_size) noise negatives
    noise_std: float = 1.0  # sigma of the Gaussian the noise starts from
    noise_steps: int = 4  # t gradient-ascent steps on the non-uniformity loss
    noise_step_size: float = 1e-3  # beta, the size of each normalised step
    noise_temperature: float | None = None  # tau_u of the non-uniformity loss (None: temperature)
    noise_mode: NoiseMode = "optimized"  # optimized | random (t = 0) | none
    false_negative_threshold: float = 0.9  # phi: complementary cosine >= phi -> weight 0
    weighting: Weighting = "complementary"  # complementary | self | none | distill
    # none: noise negatives always kept (released code); complementary: alpha = 0 where
    # cos(h_i^C, noise) >= phi, the paper's "any negative" (dclr.txt l.94; docs/dclr-loss-forms.md)
    noise_weighting: NoiseWeighting = "none"
    dclr_form: LossForm = "paper"  # paper equations, or what the official code computes
    complementary_model: str | None = None  # frozen scorer (None: the starting model itself)
    complementary_pooler: PoolerName | None = None  # its pooler (None: what its folder records)
    complementary_mode: ComplementaryMode = "cached"  # cached | on_the_fly | two_views
    complementary_cache: str | None = None  # .npy path (None: ~/.cache/dclr/complementary/<key>)
    phi_calibration: PhiCalibration = "none"  # none (phi as set) | random_pairs | paraphrase_recall
    phi_calibration_target: float = 0.001  # random_pairs: q dropped; paraphrase_recall: r of pairs

    def validate(self, config: TrainConfig) -> None:
        super().validate(config)
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
        check_target(self.phi_calibration, self.phi_calibration_target)
        if self.noise_weighting == "complementary" and (
            self.weighting != "complementary" or self.dclr_form != "paper"
        ):
            raise ConfigError(
                "noise_weighting: complementary scores noise negatives with the complementary "
                "model: it needs weighting: complementary and dclr_form: paper"
            )
        if self.phi_calibration != "none" and (
            config.method != "dclr" or self.weighting != "complementary"
        ):
            raise ConfigError(
                "phi_calibration derives phi from the complementary model: it needs "
                "method: dclr with weighting: complementary"
            )

    @property
    def needs_complementary(self) -> bool:
        return self.weighting in ("complementary", "distill")


def build_complementary(
    config: TrainConfig,
    section: DCLRSection,
    corpus: Sequence[str],
    device: torch.device,
    show_progress: bool = True,
) -> Any:
    """The frozen complementary model of DCLR, in the configured mode (None if not needed)."""
    from dclr.losses.complementary import (
        CachedComplementary,
        OnTheFlyComplementary,
        TwoViewComplementary,
    )
    from dclr.models.encoder import SentenceEncoder

    if not section.needs_complementary:
        return None
    spec = section.complementary_model or config.model.name
    encoder = SentenceEncoder.from_pretrained(spec, pooler=section.complementary_pooler)
    encoder = encoder.to(device)
    limit = config.model.max_length
    if section.complementary_mode == "cached":
        from dclr.training.phases import phase

        cache = Path(section.complementary_cache) if section.complementary_cache else None
        with phase("complementary_cache"):
            return CachedComplementary.build_or_load(
                cache, encoder, corpus, spec, limit, device=device, show_progress=show_progress
            )
    if section.complementary_mode == "on_the_fly":
        return OnTheFlyComplementary(encoder, limit)
    return TwoViewComplementary(encoder, limit)


def calibrate(
    config: TrainConfig, section: DCLRSection, corpus: Sequence[str], device: torch.device
) -> dict[str, Any]:
    """phi from the complementary model's own similarities (`dclr.losses.calibration`)."""
    from dclr.data.paraphrases import gold_paraphrase_pairs, parse_sources
    from dclr.data.paths import resolve_data_dir
    from dclr.methods.dclr_calibrate import calibrate_phi
    from dclr.models.encoder import SentenceEncoder

    spec = section.complementary_model or config.model.name
    scorer = SentenceEncoder.from_pretrained(spec, pooler=section.complementary_pooler)
    scorer = scorer.to(device)
    pairs: list[tuple[str, str]] = []
    if section.phi_calibration == "paraphrase_recall":
        gold = gold_paraphrase_pairs(
            resolve_data_dir(config.data.data_dir), parse_sources(config.data.paraphrase_sources)
        )
        pairs = [(p.first, p.second) for p in gold]
    return calibrate_phi(
        section.phi_calibration,
        section.phi_calibration_target,
        scorer,
        corpus,
        pairs,
        max_length=config.model.max_length,
        seed=config.run.seed,
    )


class DCLR(ContrastiveMethod):
    name = "dclr"
    section = DCLRSection

    def loss_module(
        self,
        config: TrainConfig,
        model: Any,
        section: ContrastiveSection,
        complementary: Any,
        start_records: dict[str, dict[str, Any]] | None = None,
    ) -> nn.Module:
        from dclr.losses.dclr import DCLRLoss

        assert isinstance(section, DCLRSection)
        return DCLRLoss(
            model,
            complementary,
            temperature=section.temperature,
            noise_ratio=section.noise_ratio,
            noise_std=section.noise_std,
            noise_steps=section.noise_steps,
            noise_step_size=section.noise_step_size,
            noise_temperature=section.noise_temperature,
            noise_mode=section.noise_mode,
            false_negative_threshold=section.false_negative_threshold,
            weighting=section.weighting,
            form=section.dclr_form,
            noise_weighting=section.noise_weighting,
            seed=config.run.seed,
            views=build_views(section, config.run.seed, dist.rank()),
            start_records=start_records,
        )

    def evaluate_start(self, config: TrainConfig) -> dict[str, float] | None:
        """The before-eval, from the pass that builds the complementary cache when both encode
        with the starting model (`dclr.methods.dclr_start`); else evaluated on its own."""
        from dclr.methods.dclr_start import shared_start_scores
        from dclr.training.phases import phase

        with phase("shared_start"):
            shared = shared_start_scores(config, self.inference_pooler(config), self)
        return shared if shared is not None else super().evaluate_start(config)

    def build_objective(
        self, config: TrainConfig, model: Any, data: Sequence[Any], device: torch.device
    ) -> nn.Module:
        section = config.section(self.name)
        # Rank 0 builds the complementary cache first; the other ranks then load it.
        main = dist.rank() == 0
        complementary = build_complementary(config, section, data, device) if main else None
        if dist.world_size() > 1:
            torch.distributed.barrier()
        if not main:
            complementary = build_complementary(config, section, data, device, False)
        if section.phi_calibration == "none":
            return self.loss_module(config, model, section, complementary)
        # a calibrated phi is the loss's input, and the calibration its step-0 record
        calibration = calibrate(config, section, data, device)
        calibrated = dataclasses.replace(section, false_negative_threshold=calibration["phi"])
        records = {"calibration": calibration}
        return self.loss_module(config, model, calibrated, complementary, records)


DCLR_METHOD = DCLR()
