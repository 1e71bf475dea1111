"""Token ids (and padded batches) of many texts without the per-text Python objects of a
tokenizer call.

`tokenizer(texts, truncation=True, max_length=limit)["input_ids"]` turns each text's Rust
`Encoding` into a dict of Python lists (transformers' `_convert_encoding`: ids, type ids, mask)
and then keeps only the ids. On the 29,511 distinct STS sentences, which the 7-task evaluation
tokenises, the call took 0.98 s and this path 0.38 s (`benchmarks/token_ids.py`, 2-core AMD EPYC,
AuthenticAMD-AVX512).

`batch_token_ids` gives the same ids: the first text goes through the tokenizer's own call,
which sets its backend's truncation, padding and special-token handling exactly as that call
does for these arguments (transformers' `set_truncation_and_padding`), then the rest go through
that backend's `encode_batch`, ids only. `batch_features` does the same for a padded batch (the
training step's tokenisation), its tensors built with numpy from the backend's padded encodings.
A slow (Python) tokenizer takes the plain call. Like the call itself, neither is safe while
another thread calls the same tokenizer with other arguments (`dclr.training.prefetch` settles
its thread first).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

# transformers' names for the backend Encoding's fields (`_convert_encoding`), in its order
FIELDS = {"input_ids": "ids", "token_type_ids": "type_ids", "attention_mask": "attention_mask"}


def rust_backend(tokenizer: Any, texts: Sequence[str]) -> Any:
    """The fast tokenizer's Rust backend when it pays (two texts or more), else None: the plain
    call then does it."""
    if len(texts) < 2 or not getattr(tokenizer, "is_fast", False):
        return None
    return getattr(tokenizer, "backend_tokenizer", None)


def batch_token_ids(tokenizer: Any, texts: Sequence[str], limit: int) -> list[list[int]]:
    """Each text's token ids, truncated at `limit` tokens: what
    `tokenizer(texts, truncation=True, max_length=limit)["input_ids"]` returns."""
    texts = list(texts)
    if not texts:
        return []
    call = {"truncation": True, "max_length": limit}
    backend = rust_backend(tokenizer, texts)
    if backend is None:
        return list(tokenizer(texts, **call)["input_ids"])
    first = tokenizer(texts[:1], **call)["input_ids"][0]  # sets the backend as the call does
    rest = backend.encode_batch(texts[1:], add_special_tokens=True)
    return [first, *(encoding.ids for encoding in rest)]


def batch_features(
    tokenizer: Any, texts: Sequence[str], limit: int, pad_to_multiple_of: int | None = None
) -> dict[str, torch.Tensor]:
    """A padded batch of `texts`: what `tokenizer(texts, padding=True, truncation=True,
    max_length=limit, pad_to_multiple_of=pad_to_multiple_of, return_tensors="pt")` returns
    (input ids, and token type ids and attention mask where the tokenizer's model takes them)."""
    texts = list(texts)
    call = {"padding": True, "truncation": True, "max_length": limit,
            "pad_to_multiple_of": pad_to_multiple_of}  # fmt: skip
    backend = rust_backend(tokenizer, texts)
    if backend is None:
        return dict(tokenizer(texts, return_tensors="pt", **call))
    tokenizer(texts[:1], **call)  # sets the backend's truncation and padding as the call does
    # all of them (the first again): padded to the batch's longest, not the first's length
    encodings = backend.encode_batch(texts, add_special_tokens=True)
    names = ["input_ids"] + [
        n for n in ("token_type_ids", "attention_mask") if n in tokenizer.model_input_names
    ]
    return {
        name: torch.from_numpy(
            np.array([getattr(e, FIELDS[name]) for e in encodings], dtype=np.int64)
        )
        for name in names
    }
