"""Names of the positive-view strategies and the validation of a (strategy, rate) option."""

from __future__ import annotations

from typing import Literal, get_args

from dclr.errors import ConfigError

ViewStrategy = Literal[
    # the backbone's internal dropout (SimCSE's view; hidden + attention dropout in every layer).
    # Not ConSERT's "dropout" augmentation, which is `embedding_dropout` below.
    "dropout",
    "none",  # dropout off for this view: a deterministic encoding
    "token_shuffle",  # permute the position ids of the real tokens
    "token_cutoff",  # zero the input embeddings of a random fraction of the real tokens
    "span_cutoff",  # zero the input embeddings of one random contiguous span of real tokens
    "feature_cutoff",  # zero a random fraction of the embedding dimensions of the real tokens
    # ConSERT's "dropout": zero a random fraction of the elements of the real tokens' embedding
    # matrix ("dropout independently zeros embedding elements", consert.txt l.71)
    "embedding_dropout",
    "adversarial",  # FGSM-style perturbation from the supervised loss (supervised training only)
]
VIEW_STRATEGIES: tuple[str, ...] = get_args(ViewStrategy)
# Strategies whose rate is the fraction cut; the others ignore the rate.
RATED = ("token_cutoff", "span_cutoff", "feature_cutoff", "embedding_dropout")


def check_view(strategy: str, rate: float, name: str = "view") -> tuple[str, float]:
    """Validate one view option; returns it. Unknown names and rates outside [0, 1) are errors."""
    if strategy not in VIEW_STRATEGIES:
        raise ConfigError(
            f"{name}: unknown view strategy {strategy!r}; choose from {', '.join(VIEW_STRATEGIES)}"
        )
    if not 0 <= rate < 1:
        raise ConfigError(f"{name}_rate must be in [0, 1), got {rate}")
    return strategy, float(rate)
