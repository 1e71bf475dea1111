"""DCLR (Zhou et al., ACL 2022) as a method: SimCSE + noise-based negatives + instance weighting
by a frozen complementary model (see `dclr.losses.dclr`, docs/dclr-loss-forms.md)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from dclr import distributed as dist
from dclr.errors import ConfigError
from dclr.methods.dclr_rows import sample_rows_only
from dclr.methods.simcse import ContrastiveMethod, build_views
from dclr.models.attention_mask import step_mask_choice
from dclr.options.contrastive import ContrastiveSection
from dclr.options.dclr import DCLRSection
from dclr.progress import announce, short_number
from dclr.training.phases import phase

if TYPE_CHECKING:
    from dclr.contract import PreparedRun
    from dclr.options.config import TrainConfig


def build_complementary(run: PreparedRun, section: DCLRSection, show_progress: bool = True) -> Any:
    """The frozen complementary model of DCLR over the run's examples, in the configured mode
    (None if not needed)."""
    from dclr.losses.complementary import (
        CachedComplementary,
        OnTheFlyComplementary,
        PlannedComplementary,
        TwoViewComplementary,
    )
    from dclr.models.encoder import SentenceEncoder

    if not section.needs_complementary:
        return None
    config, corpus, device = run.config, run.data, run.device
    spec = section.complementary_model or config.model.name

    def load() -> SentenceEncoder:
        return SentenceEncoder.from_pretrained(spec, pooler=section.complementary_pooler)

    encoder = load().to(device)
    limit = config.model.max_length
    if section.complementary_mode == "cached":
        cache = Path(section.complementary_cache) if section.complementary_cache else None
        # rank 0's answer on every rank: it may be writing the cache now (`dclr_start`)
        if dist.rank0_value(lambda: sample_rows_only(run, section, cache, encoder.pooler, spec)):
            return PlannedComplementary(encoder, corpus, limit, device=device, reload=load)
        with phase("complementary_cache"):
            return CachedComplementary.build_or_load(
                cache, encoder, corpus, spec, limit, device=device, show_progress=show_progress
            )
    # it encodes each batch inside the step: the step's attention-mask choice, even in eval mode
    # (`model.prepared_mask` auto leaves eval-mode forwards to transformers' mask and its read)
    encoder.prepared_mask = step_mask_choice(config.model.prepared_mask, device)
    if section.complementary_mode == "on_the_fly":
        return OnTheFlyComplementary(encoder, limit)
    return TwoViewComplementary(encoder, limit)


def calibrate(
    config: TrainConfig, section: DCLRSection, corpus: Sequence[str], device: torch.device
) -> dict[str, Any]:
    """phi from the complementary model's own similarities (`dclr.losses.calibration`)."""
    from dclr.data.paraphrases import gold_paraphrase_pairs, parse_sources
    from dclr.data.paths import resolve_data_dir
    from dclr.losses.complementary import weights_digest
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
    record = calibrate_phi(
        section.phi_calibration,
        section.phi_calibration_target,
        scorer,
        corpus,
        pairs,
        max_length=config.model.max_length,
        seed=config.run.seed,
    )
    digest = weights_digest(spec)
    if digest is not None:  # which weights scored: a resume compares them (`saved_calibration`)
        record["scorer_weights"] = digest
    return record


def calibration_inputs(config: Mapping[str, Any]) -> dict[str, Any]:
    """What `calibrate` derives phi from, read from a config's `to_dict()` form: its rule, the
    scorer, the sentences' length, the sample's seed and the data section (the corpus it
    samples, the paraphrase pairs of paraphrase_recall)."""
    section, model, data = config.get("dclr") or {}, config.get("model") or {}, config.get("data")
    return {
        "mode": section.get("phi_calibration"),
        "target": section.get("phi_calibration_target"),
        "scorer": section.get("complementary_model") or model.get("name"),
        "pooler": section.get("complementary_pooler"),
        "max_length": model.get("max_length"),
        "seed": (config.get("run") or {}).get("seed"),
        "data": data,  # the corpus sampled (few-shot, dedup, ...) and the paraphrase pairs
    }


def saved_calibration(
    saved_start: Mapping[str, Any], config: Mapping[str, Any], scorer_weights: str | None = None
) -> dict[str, Any] | None:
    """The calibration a resumed run saved (its step-0 record, phi in it), when the config
    (`to_dict()` form) still calibrates from the same inputs and the scorer's weights are those
    it recorded (`scorer_weights`: `weights_digest` of the scorer now, None for a hub id not in
    the local cache); else None, and phi is calibrated: a run started, one checkpointed before
    dclr saved it, or one resumed with a new rule, target, scorer, data section or a scorer
    retrained in place."""
    record = (saved_start.get("start_records") or {}).get("calibration")
    phi = (saved_start.get("derived") or {}).get("false_negative_threshold")
    if not isinstance(record, dict) or not isinstance(phi, float) or record.get("phi") != phi:
        return None
    if calibration_inputs(saved_start.get("config") or {}) != calibration_inputs(config):
        return None
    if record.get("scorer_weights") != scorer_weights:  # the scorer's folder was retrained
        return None
    return dict(record)


class DCLR(ContrastiveMethod):
    name = "dclr"
    title = "DCLR, debiased contrastive learning (Zhou et al., ACL 2022)"
    label = "DCLR"
    section = DCLRSection

    def loss_module(
        self,
        config: TrainConfig,
        model: Any,
        section: ContrastiveSection,
        complementary: Any,
        start_records: dict[str, dict[str, Any]] | None = None,
        derived_settings: dict[str, Any] | None = None,
    ) -> nn.Module:
        from dclr.losses.dclr import DCLRLoss

        assert isinstance(section, DCLRSection)
        return DCLRLoss(
            model,
            complementary,
            section.loss_options(),
            seed=config.run.seed,
            views=build_views(section, config.run.seed, dist.rank()),
            start_records=start_records,
            derived_settings=derived_settings,
        )

    def evaluate_start(
        self, config: TrainConfig, run: PreparedRun | None = None
    ) -> dict[str, float] | None:
        """The before-eval, from the pass that builds the run's complementary cache when both
        encode with the starting model (`dclr.methods.dclr_start`); else evaluated on its own."""
        from dclr.methods.dclr_start import shared_start_scores

        shared = None
        if run is not None:
            with phase("shared_start"):
                shared = shared_start_scores(run, self.inference_pooler(config))
        return shared if shared is not None else super().evaluate_start(config)

    def describe(self, run: PreparedRun) -> dict[str, Any]:
        """φ for results.json and the summary: as set (a calibrated φ is reported as derived)."""
        section = run.config.section("dclr")
        if section.phi_calibration != "none":
            return {}
        return {"false_negative_threshold": section.false_negative_threshold}

    def build_objective(self, run: PreparedRun, model: Any) -> nn.Module:
        section = run.config.section(self.name)
        # Under torchrun the ranks build it together: a cache's pass is split among them
        # (`dclr.losses.complementary.encode_rows_across_ranks`), rank 0 showing the progress.
        complementary = build_complementary(run, section, show_progress=run.rank == 0)
        objective = self.calibrated_loss(run, model, section, complementary)
        prefill = getattr(complementary, "prefill", None)
        if prefill is not None:  # a cache of the sampled rows only: encode the plan's rows now
            with phase("complementary_cache"):
                prefill(run.planned_rows(), show_progress=run.rank == 0)
        return objective

    def calibrated_loss(
        self, run: PreparedRun, model: Any, section: DCLRSection, complementary: Any
    ) -> nn.Module:
        """The loss, with phi as set or calibrated before step 1 (`section.phi_calibration`)."""
        config = run.config
        if section.phi_calibration == "none":
            return self.loss_module(config, model, section, complementary)
        # a calibrated phi is the loss's input, the calibration its step-0 record, and phi the
        # value the run reports (start, results.json, model card) in place of the config's; a
        # resumed run takes both from its checkpoint (`run.saved_start`), not measured again.
        # Under torchrun rank 0 decides and measures, and every rank gets its record.
        calibration = calibrate_once(run, lambda: self._calibration(run, section))
        phi = calibration["phi"]
        calibrated = dataclasses.replace(section, false_negative_threshold=phi)
        records = {"calibration": calibration}
        derived = {"false_negative_threshold": phi}
        return self.loss_module(config, model, calibrated, complementary, records, derived)

    def _calibration(self, run: PreparedRun, section: DCLRSection) -> dict[str, Any]:
        """The checkpoint's calibration when a resumed run may reuse it, else a new one."""
        from dclr.losses.complementary import weights_digest

        config = run.config
        saved = None
        record = (run.saved_start.get("start_records") or {}).get("calibration")
        if record:  # a resumed run
            spec = section.complementary_model or config.model.name
            saved = saved_calibration(run.saved_start, config.to_dict(), weights_digest(spec))
            if saved is None and "scorer_weights" not in record:
                announce("phi_calibration: the checkpoint's phi does not record which scorer "
                         "weights it was calibrated with: calibrating again")  # fmt: skip
            elif saved is None:
                announce("phi_calibration: the checkpoint's phi was calibrated from other "
                         "settings, data or scorer weights: calibrating again")  # fmt: skip
        if saved is not None:
            announce(f"phi_calibration: phi {short_number(saved['phi'])} as calibrated before "
                     "step 1, from the run's checkpoint")  # fmt: skip
            return saved
        with phase("phi_calibration"):
            return calibrate(config, section, run.data, run.device)


def calibrate_once(run: PreparedRun, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`measure()` on rank 0, its record sent to every rank (torchrun): one decision (the
    checkpoint's phi, or a new calibration) and one phi for the whole run, whatever each node's
    files or each device's rounding would give. A failure on rank 0 is raised on every rank
    (the others would wait in the broadcast). In one process, `measure()`."""
    if run.world == 1:
        return measure()
    sent: list[Any] = [None]
    failure: BaseException | None = None
    if run.rank == 0:
        try:
            sent[0] = {"record": measure()}
        except Exception as err:  # noqa: BLE001 - every kind is passed on, then raised here
            failure, sent[0] = err, {"error": f"{type(err).__name__}: {err}"}
    torch.distributed.broadcast_object_list(sent, src=0)
    if failure is not None:
        raise failure
    if "error" in sent[0]:
        raise ConfigError(f"phi calibration failed on rank 0: {sent[0]['error']}")
    return dict(sent[0]["record"])


DCLR_METHOD = DCLR()
