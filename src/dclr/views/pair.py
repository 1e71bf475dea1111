"""Two positive views of a batch (view 1 / view 2), encoded by a sentence encoder.

`PositiveViews(ViewSpec("token_shuffle"), ViewSpec("feature_cutoff", 0.2), seed)` is ConSERT's
best pair. With both views `dropout` this is SimCSE's doubled forward (callers keep their own path
for it, so existing results do not change). The views of step s use a generator seeded with
(seed, step, rank): a run is reproducible and resumable, and DDP ranks draw different masks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dclr.errors import ConfigError
from dclr.models.packing import position_offset
from dclr.views.cutoff import (
    cut_elements,
    cut_features,
    cut_tokens,
    element_dropout_mask,
    feature_cutoff_mask,
    span_cutoff_mask,
    token_cutoff_mask,
)
from dclr.views.masks import content_mask
from dclr.views.shuffle import shuffled_position_ids
from dclr.views.strategies import check_view

# Keeps the view generator's stream apart from DCLR's noise generator (seeded from seed, step).
VIEW_SEED_SALT = 7919
SEED_STRIDE = 1_000_003  # a prime larger than any step count: (seed, step) pairs do not collide


@dataclass(frozen=True)
class ViewSpec:
    """One view: a strategy of `dclr.views.strategies.VIEW_STRATEGIES` and its rate in [0, 1)."""

    strategy: str = "dropout"
    rate: float = 0.0

    def __post_init__(self) -> None:
        check_view(self.strategy, self.rate)


def view_generator(seed: int, step: int, rank: int = 0) -> torch.Generator:
    """The CPU generator of the views of (seed, step) on one rank."""
    return torch.Generator().manual_seed(((seed + VIEW_SEED_SALT) * SEED_STRIDE + step) * 64 + rank)


def unwrap(model: Any) -> Any:
    """The SentenceEncoder inside a DDP wrapper (or the model itself)."""
    return getattr(model, "module", model)


@contextlib.contextmanager
def dropout_off(encoder: Any) -> Iterator[None]:
    """Switch the backbone to eval mode (no dropout anywhere in it) and restore it afterwards.

    Only the backbone: a train-only head on the encoder (SimCSE's MLP) stays in training mode.
    """
    backbone = getattr(encoder, "backbone", encoder)
    was_training = backbone.training
    backbone.eval()
    try:
        yield
    finally:
        backbone.train(was_training)


def view_inputs(
    encoder: Any, features: dict[str, torch.Tensor], spec: ViewSpec, generator: torch.Generator
) -> dict[str, torch.Tensor | None]:
    """The keyword inputs of `encoder(**inputs)` for one view of `features`.

    Views that need `inputs_embeds` pass `input_ids=None` (the model embeds nothing itself);
    views that need `position_ids` pass them; the encoder then takes its padded path.
    """
    if spec.strategy in ("dropout", "none"):
        return dict(features)
    if spec.strategy == "adversarial":
        raise ConfigError("the adversarial view needs a supervised loss (labels) to attack")
    ids, mask = features["input_ids"], features["attention_mask"]
    content = content_mask(ids, mask, encoder.tokenizer.all_special_ids)  # (b, L)
    if spec.strategy == "token_shuffle":
        offset = position_offset(encoder.backbone)
        return {**features, "position_ids": shuffled_position_ids(content, generator, offset)}
    embeds = encoder.backbone.get_input_embeddings()(ids)  # (b, L, d)
    if spec.strategy == "token_cutoff":
        embeds = cut_tokens(embeds, token_cutoff_mask(content, spec.rate, generator))
    elif spec.strategy == "span_cutoff":
        embeds = cut_tokens(embeds, span_cutoff_mask(content, spec.rate, generator))
    elif spec.strategy == "feature_cutoff":
        columns = feature_cutoff_mask(ids.shape[0], embeds.shape[-1], spec.rate, generator)
        embeds = cut_features(embeds, content, columns)
    elif spec.strategy == "embedding_dropout":
        embeds = cut_elements(
            embeds, element_dropout_mask(content, embeds.shape[-1], spec.rate, generator)
        )
    else:  # pragma: no cover - check_view rejects unknown names
        raise ConfigError(f"unknown view strategy {spec.strategy!r}")
    return {**features, "input_ids": None, "inputs_embeds": embeds}


class PositiveViews:
    """Encode a batch as two views: `encode(model, features, step) -> (z1, z2)`, each (n, d).

    Args:
        view1, view2: the strategy of each view (`ViewSpec`).
        seed: seeds the generator of each step's random choices (with the step and the rank).
        rank: this process's DDP rank.
    Each view runs its own forward; a `none` view runs with the backbone's dropout off. Both
    `none` (with a deterministic backbone) give identical views; both `dropout` reduce to SimCSE.
    """

    def __init__(self, view1: ViewSpec, view2: ViewSpec, seed: int = 0, rank: int = 0) -> None:
        for spec in (view1, view2):
            if spec.strategy == "adversarial":
                raise ConfigError(
                    "view strategy 'adversarial' needs labels: it is computed from the supervised "
                    "loss, so use it in supervised (NLI) training only"
                )
        self.view1, self.view2, self.seed, self.rank = view1, view2, seed, rank

    @property
    def is_default(self) -> bool:
        """Both views are plain dropout views (SimCSE's doubled forward)."""
        return self.view1.strategy == self.view2.strategy == "dropout"

    def encode(
        self, model: Callable[..., torch.Tensor], features: dict[str, torch.Tensor], step: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        encoder = unwrap(model)
        generator = view_generator(self.seed, step, self.rank)
        out = []
        for spec in (self.view1, self.view2):
            inputs = view_inputs(encoder, features, spec, generator)
            guard = dropout_off(encoder) if spec.strategy == "none" else contextlib.nullcontext()
            with guard:
                out.append(model(**inputs))  # (n, d)
        return out[0], out[1]
