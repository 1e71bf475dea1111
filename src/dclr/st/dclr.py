"""DCLR (Zhou et al., ACL 2022) as a sentence-transformers loss.

The maths is dclr's own: this module embeds the batch, asks the guide (DCLR's complementary model)
for its similarities, and hands both to `dclr.losses.dclr.DCLRLoss.objective`, which draws the noise
negatives (`noise_negatives`), weights in-batch negatives (`false_negative_weights` /
`official_weights`) and computes `dclr_paper_loss` or `dclr_official_loss`. Nothing is re-derived.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from dclr import distributed as dist
from dclr.contract import Batch
from dclr.errors import ConfigError
from dclr.losses.dclr import DCLRLoss as DCLRObjective
from dclr.losses.simcse import cosine_matrix
from dclr.options.dclr import DCLROptions, LossForm, Weighting, option_names
from dclr.st.embed import ddp_scale, embed, gather_strings, two_views

DCLR_CITATION = """
@inproceedings{zhou2022debiased,
    title = {Debiased Contrastive Learning of Unsupervised Sentence Representations},
    author = {Zhou, Kun and Zhang, Beichen and Zhao, Wayne Xin and Wen, Ji-Rong},
    booktitle = {Proceedings of ACL},
    year = {2022},
    url = {https://aclanthology.org/2022.acl-long.423},
}
"""


class _BatchTeacher:
    """dclr's `Complementary` protocol over the similarities this loss computed for the batch.

    dclr's objective asks its complementary model for (n_global, n_global) cosines; here they come
    from the guide (or a precomputed scorer) and are handed over just before each call.
    """

    def __init__(self) -> None:
        self.cos: torch.Tensor | None = None
        self.anchors: torch.Tensor | None = None  # the guide's h_i (noise_weighting)

    def similarities(self, indices: Any, sentences: Any) -> torch.Tensor:
        if self.cos is None:
            raise RuntimeError("no guide similarities were set for this batch")
        return self.cos

    def anchor_vectors(self, indices: Any, sentences: Any) -> torch.Tensor:
        if self.anchors is None:
            raise RuntimeError("no guide vectors were set for this batch")
        return self.anchors


def _is_sentence_transformer(obj: object) -> bool:
    return isinstance(obj, nn.Module) and hasattr(obj, "tokenizer") and callable(obj)


class DCLRLoss(nn.Module):
    """DCLR's debiased contrastive loss for `SentenceTransformerTrainer`.

    Inputs: one text column (SimCSE style: each sentence is encoded twice and dropout makes the two
    views) or two columns (anchor, positive). Labels: none, except with a precomputed guide, where
    the `label` column holds each sentence's row index in the guide's cache.

    Args:
        model: the SentenceTransformer being trained.
        guide: DCLR's complementary model, which scores every in-batch negative; a likely false
            negative (cosine >= `false_negative_threshold`) is dropped. Either a SentenceTransformer
            (frozen here: `requires_grad_(False)`, `eval()`, run under `no_grad`, never part of the
            trained model) or a precomputed scorer with `similarities(indices, sentences)` such as
            `dclr.losses.complementary.CachedComplementary` (indices from the `label` column).
            Needed for weighting 'complementary' and 'distill'.
        temperature: tau (paper: 0.05).
        noise_ratio: k = round(ratio * global batch size) noise negatives (paper: 1).
        noise_std, noise_steps, noise_step_size: sigma, t, beta of the noise (paper: 1, 4, 1e-3).
        noise_temperature: tau_u of the non-uniformity loss the noise ascends (default: tau).
        noise_mode: 'optimized' (paper), 'random' (no ascent) or 'none'.
        false_negative_threshold: phi, a cosine in [-1, 1] (paper: 0.9 BERT, 0.85 RoBERTa).
        weighting: 'complementary' (the guide, paper), 'self' (the trained model scores its own
            negatives, no gradient), 'none', or 'distill' (KL to the guide's distribution).
            Default: 'complementary' with a guide, else 'none'.
        form: 'paper' (the paper's equation) or 'official' (the released code's form, see
            docs/dclr-loss-forms.md).
        seed: noise comes from a generator seeded by (seed, call number): reproducible and the same
            on every rank.
        gather_across_devices: under torch.distributed, use every rank's rows as negatives
            (True, the default) or only this rank's (False), as sentence-transformers' argument.

    Under torch.distributed the views (and the guide's vectors) are gathered across ranks, so every
    rank sees the global batch as negatives, as `dclr train` does (`gather_across_devices=True`,
    our default for that reason; sentence-transformers' MNRL / GIST default to False). With
    `gather_across_devices=False` each rank's negatives are its own rows only, as theirs.
    With noise_mode 'none' and weighting 'none' it is SimCSE's InfoNCE (MultipleNegativesRankingLoss
    at scale 1 / tau with dropout views). `last_parts` holds the parts of the latest call
    (contrastive, dropped_fraction, noise_count); `dclr.st.log_dclr_parts(trainer, loss)` puts
    their means in the trainer's logs (TensorBoard included) as `dclr/<part>`.
    """

    def __init__(
        self,
        model: nn.Module,
        guide: Any = None,
        *,
        seed: int = 0,
        gather_across_devices: bool = True,
        weighting: Weighting | None = None,
        form: LossForm | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        unknown = sorted(set(options) - set(option_names()))
        if unknown:
            close = {u: difflib.get_close_matches(u, option_names(), n=1) for u in unknown}
            hints = "; ".join(f"{u}{f' (did you mean {c[0]}?)' if c else ''}"
                              for u, c in close.items())  # fmt: skip
            raise ConfigError(
                f"DCLRLoss got unknown option(s): {hints}; the options are "
                f"{', '.join(option_names())}, form, seed and gather_across_devices"
            )
        if weighting is None and guide is None:
            warnings.warn(
                "DCLRLoss without a guide: instance weighting is off (weighting='none'), so no "
                "false negative is dropped; pass guide=SentenceTransformer(...) (e.g. the frozen "
                "starting model) for DCLR's weighting, or weighting='none' to silence this",
                UserWarning,
                stacklevel=2,
            )
        if form is not None:  # the short name this face has always taken for dclr_form
            options["dclr_form"] = form
        weighting = weighting or ("complementary" if guide is not None else "none")
        loss_options = DCLROptions(weighting=weighting, **options)
        loss_options.check_options()
        if loss_options.needs_complementary and guide is None:
            raise ConfigError(
                f"weighting {weighting!r} needs a guide (DCLR's complementary model): pass "
                "guide=SentenceTransformer(...) or a precomputed scorer, or weighting='none'"
            )
        self.model = model
        # Kept here: under DDP the trainer swaps `model` for its wrapper, which has no tokenizer.
        self.tokenizer: Any = getattr(model, "tokenizer", None)
        self.guide = guide
        self.guide_is_model = _is_sentence_transformer(guide)
        if self.guide_is_model:
            guide.requires_grad_(False)
            guide.eval()
            self.must_retokenize = _must_retokenize(model, guide)
        elif guide is not None and not callable(getattr(guide, "similarities", None)):
            raise ConfigError(
                "guide must be a SentenceTransformer or have similarities(indices, sentences)"
            )
        self._teacher = _BatchTeacher()
        self._anchors: torch.Tensor | None = None  # the guide's vectors of the current batch
        needs_teacher = loss_options.needs_complementary
        # dclr's own objective holds the maths; it never sees a model.
        self.objective = DCLRObjective(
            None, self._teacher if needs_teacher else None, loss_options, seed=seed
        )
        self.noise_temperature = loss_options.noise_temperature
        self.gather_across_devices = gather_across_devices
        self.step = 0  # calls so far: the noise of call s is drawn from (seed, s)
        self.last_parts: dict[str, torch.Tensor] = {}
        self._part_sums: dict[str, torch.Tensor] = {}
        self._part_calls = 0

    # ---- the guide ----------------------------------------------------------------------------
    @torch.no_grad()
    def guide_similarities(
        self, sentence_features: Sequence[dict[str, torch.Tensor]], labels: torch.Tensor | None
    ) -> torch.Tensor | None:
        """The guide's (n_global, n_global) cosines between anchors (rows) and positives."""
        if self.guide is None or self.objective.options.weighting not in (
            "complementary",
            "distill",
        ):
            return None
        columns = list(sentence_features)
        if not self.guide_is_model:
            if labels is None:
                raise ValueError(
                    "a precomputed guide needs each sentence's row index in the `label` column"
                )
            indices = dist.gather_with_grad(labels.reshape(-1).long())
            sentences = gather_strings(self._decode(columns[0]))
            if self.objective.options.noise_weighting == "complementary":
                self._anchors = self.guide.anchor_vectors(indices, sentences).float()
            return self.guide.similarities(indices, sentences).float()
        if self.guide.training:  # a trainer may have switched every module to train mode
            self.guide.eval()
        guide_columns = [self._guide_features(c) for c in columns]
        vectors = [embed(self.guide, c) for c in guide_columns]  # (n_local, d_guide) each
        anchors = dist.gather_with_grad(vectors[0].float())
        positives = anchors if len(vectors) == 1 else dist.gather_with_grad(vectors[1].float())
        if self.objective.options.noise_weighting == "complementary":  # only then are they scored
            self._anchors = torch.nn.functional.normalize(anchors, dim=-1)
        return cosine_matrix(anchors, positives)

    def _decode(self, features: dict[str, torch.Tensor]) -> list[str]:
        return self.tokenizer.batch_decode(features["input_ids"], skip_special_tokens=True)

    def _guide_features(self, features: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if not self.must_retokenize:
            return {k: v for k, v in features.items() if k != "sentence_embedding"}
        if "cu_seq_lens_q" in features:
            raise ValueError("a guide with another tokenizer needs padded (not flattened) batches")
        texts = self._decode(features)
        preprocess = getattr(self.guide, "preprocess", None) or self.guide.tokenize
        device = next(self.guide.parameters()).device
        return {
            k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in preprocess(texts).items()
        }

    # ---- the loss -----------------------------------------------------------------------------
    def forward(
        self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor | None
    ) -> torch.Tensor:
        columns = list(sentence_features)
        with dist.gathering(self.gather_across_devices):
            teacher = self.guide_similarities(columns, labels)
            z1, z2 = two_views(self.model, columns)
            return self.compute_loss_from_embeddings(z1, z2, teacher) * ddp_scale()

    def compute_loss_from_embeddings(
        self,
        z1: torch.Tensor,
        z2: torch.Tensor,
        guide_cos: torch.Tensor | None = None,
        guide_anchors: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """dclr's DCLR objective on this rank's views z1, z2 (n_local, d) and the guide's global
        (n_global, n_global) cosines; the views are gathered across ranks inside.
        `guide_anchors` (n_global, d): the guide's vectors, which noise_weighting 'complementary'
        scores the noise against (default: those `forward` computed for this batch)."""
        anchors = guide_anchors if guide_anchors is not None else self._anchors
        self._teacher.cos, self._teacher.anchors = guide_cos, anchors
        try:
            with dist.gathering(self.gather_across_devices):
                out = self.objective.objective(z1, z2, Batch(features={}, step=self.step))
        finally:
            self._teacher.cos = self._teacher.anchors = self._anchors = None
        self.step += 1
        self.last_parts = {k: v for k, v in out.items() if k != "loss"}
        for name, value in self.last_parts.items():  # detached sums: no device sync per step
            total = self._part_sums.get(name)
            part = value.detach().float()
            self._part_sums[name] = part if total is None else total + part
        self._part_calls += 1
        return out["loss"]

    def pop_part_means(self) -> dict[str, float]:
        """Each part's mean over the calls since the previous pop (`dclr.st.log_dclr_parts`)."""
        means = {k: float(v) / self._part_calls for k, v in self._part_sums.items()}
        self._part_sums, self._part_calls = {}, 0
        return means

    def get_config_dict(self) -> dict[str, Any]:
        o = self.objective.options
        return {
            "guide": guide_name(self.guide),
            "temperature": o.temperature,
            "noise_ratio": o.noise_ratio,
            "noise_std": o.noise_std,
            "noise_steps": o.noise_steps,
            "noise_step_size": o.noise_step_size,
            "noise_temperature": self.noise_temperature,
            "noise_mode": o.noise_mode,
            "noise_gradient": o.noise_gradient,
            "noise_objective": o.noise_objective,
            "false_negative_threshold": o.false_negative_threshold,
            "false_negative_rule": o.false_negative_rule,
            "pair_margin": o.pair_margin,
            "weighting": o.weighting,
            "noise_weighting": o.noise_weighting,
            "form": o.dclr_form,  # the card's key since the face's first release
            "seed": self.objective.seed,
            "gather_across_devices": self.gather_across_devices,
        }

    @property
    def citation(self) -> str:
        return DCLR_CITATION


def guide_name(guide: Any) -> str | None:
    """What the model card calls the guide: its base model or hub id, a local folder by its base
    name (never its path, as `dclr serve` names models), else its class."""
    if guide is None:
        return None
    card = getattr(guide, "model_card_data", None)
    base = getattr(card, "base_model", None)
    if base:
        return str(base)
    try:
        source = str(guide[0].auto_model.config._name_or_path or "")
    except (TypeError, IndexError, KeyError, AttributeError):
        source = ""
    if source:
        from dclr.models.resolve import served_name

        return served_name(source)
    return type(guide).__name__


def _must_retokenize(model: Any, guide: Any) -> bool:
    """True when the guide cannot read the trained model's token ids as they are."""
    try:
        same_vocab = model.tokenizer.get_vocab() == guide.tokenizer.get_vocab()
    except AttributeError:
        return True
    limits: tuple[Any, Any] = (
        getattr(guide, "max_seq_length", None),
        getattr(model, "max_seq_length", None),
    )
    shorter = None not in limits and limits[0] < limits[1]
    return not same_vocab or shorter
