"""The one thing the training loop hands an objective: a `Batch`.

Every method's objective is called as `objective(batch) -> dict[str, Tensor]` with `"loss"` and
named parts to log. The loop fills what it knows (the step, the batch's corpus indices and
examples); the method's `collate` turns its examples into `features` (and `labels`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Batch:
    """One optimisation step's input.

    features: what the model consumes, already on the device: a tokenization
        {"input_ids": (m, L), "attention_mask": (m, L), ...}, or one per part (DualCSE:
        {"explicit": {...}, "implicit": {...}}).
    step: the 0-based optimizer step (seeds noise and views; a run is resumable).
    indices: (B,) corpus indices of the *global* batch (all ranks), or None.
    sentences: the global batch's examples (strings for a plain corpus), or None.
    labels: (n,) integer labels (NLI pairs), or None.
    """

    features: Mapping[str, Any]
    step: int = 0
    indices: torch.Tensor | None = None
    sentences: Sequence[Any] | None = None
    labels: torch.Tensor | None = None
