"""Two positive views of a batch (view 1 / view 2), encoded by a sentence encoder.

`PositiveViews(ViewSpec("token_shuffle"), ViewSpec("feature_cutoff", 0.2), seed)` is ConSERT's
best pair. With both views `dropout` this is SimCSE's doubled forward (callers keep their own path
for it, so existing results do not change). The views of step s use a generator seeded with
(seed, step, rank): a run is reproducible and resumable, and DDP ranks draw different masks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
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


def draw_view(
    encoder: Any, features: dict[str, torch.Tensor], spec: ViewSpec, generator: torch.Generator
) -> dict[str, torch.Tensor]:
    """One view's random choices for `features`, drawn from `generator` on the CPU:
    {"position_ids"} (token shuffle), {"cut"} (token / span cutoff), {"columns", "content"}
    (feature cutoff), {"elements"} (embedding dropout), or {} (dropout, none).

    From host `features` (the loop draws a step's views with its batch: `DrawsAhead`) nothing
    is read from the device; from device features the content mask is copied to the host once.
    """
    if spec.strategy in ("dropout", "none"):
        return {}
    if spec.strategy == "adversarial":
        raise ConfigError("the adversarial view needs a supervised loss (labels) to attack")
    ids, mask = features["input_ids"], features["attention_mask"]
    content = content_mask(ids, mask, encoder.tokenizer.all_special_ids)  # (b, L)
    if spec.strategy == "token_shuffle":
        offset = position_offset(encoder.backbone)
        return {"position_ids": shuffled_position_ids(content, generator, offset)}
    dim = encoder.backbone.get_input_embeddings().embedding_dim
    if spec.strategy == "token_cutoff":
        return {"cut": token_cutoff_mask(content, spec.rate, generator)}
    if spec.strategy == "span_cutoff":
        return {"cut": span_cutoff_mask(content, spec.rate, generator)}
    if spec.strategy == "feature_cutoff":
        columns = feature_cutoff_mask(ids.shape[0], dim, spec.rate, generator)
        return {"columns": columns, "content": content}
    if spec.strategy == "embedding_dropout":
        return {"elements": element_dropout_mask(content, dim, spec.rate, generator)}
    raise ConfigError(f"unknown view strategy {spec.strategy!r}")  # pragma: no cover


def apply_view(
    encoder: Any, features: dict[str, torch.Tensor], drawn: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor | None]:
    """The keyword inputs of `encoder(**inputs)` for the view `drawn` (`draw_view`) of `features`.

    Views that need `inputs_embeds` pass `input_ids=None` (the model embeds nothing itself);
    views that need `position_ids` pass them; the encoder then takes its padded path.
    """
    if not drawn:
        return dict(features)
    device = features["input_ids"].device
    if "position_ids" in drawn:
        return {**features, "position_ids": drawn["position_ids"].to(device)}
    embeds = encoder.backbone.get_input_embeddings()(features["input_ids"])  # (b, L, d)
    if "cut" in drawn:
        embeds = cut_tokens(embeds, drawn["cut"])
    elif "columns" in drawn:
        embeds = cut_features(embeds, drawn["content"], drawn["columns"])
    else:
        embeds = cut_elements(embeds, drawn["elements"])
    return {**features, "input_ids": None, "inputs_embeds": embeds}


def view_inputs(
    encoder: Any, features: dict[str, torch.Tensor], spec: ViewSpec, generator: torch.Generator
) -> dict[str, torch.Tensor | None]:
    """One view of `features` drawn from `generator` and applied: `apply_view(draw_view(...))`."""
    return apply_view(encoder, features, draw_view(encoder, features, spec, generator))


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

    def draw(
        self, model: Any, features: dict[str, torch.Tensor], step: int = 0
    ) -> dict[str, dict[str, torch.Tensor]]:
        """Both views' random choices for step `step`, {"view1": ..., "view2": ...} (`draw_view`):
        from host features the loop draws them with the batch, ahead of the step."""
        encoder = unwrap(model)
        generator = view_generator(self.seed, step, self.rank)
        return {
            name: draw_view(encoder, features, spec, generator)
            for name, spec in (("view1", self.view1), ("view2", self.view2))
        }

    def encode(
        self,
        model: Callable[..., torch.Tensor],
        features: dict[str, torch.Tensor],
        step: int = 0,
        drawn: Mapping[str, dict[str, torch.Tensor]] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """z1, z2 (n, d): the views `drawn` for this step (`draw`), or drawn here."""
        encoder = unwrap(model)
        drawn = drawn if drawn is not None else self.draw(encoder, features, step)
        out = []
        for name, spec in (("view1", self.view1), ("view2", self.view2)):
            inputs = apply_view(encoder, features, drawn[name])
            guard = dropout_off(encoder) if spec.strategy == "none" else contextlib.nullcontext()
            with guard:
                out.append(model(**inputs))  # (n, d)
        return out[0], out[1]
