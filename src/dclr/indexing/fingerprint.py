"""A model's fingerprint: a hash of what decides its vectors, so saved vectors name their model.

Two encoders get the same fingerprint exactly when they hold the same backbone weights (names,
dtypes, shapes, bytes), the same tokenizer vocabulary and casing, the same pooler and the same
maximum length. The folder path does not enter, so a copied or renamed model still matches, and a
retrained one in the same folder does not. A quantised encoder (`dclr.models.precision`) adds its
precision to the settings and hashes its int8 weights with their scales, so its vectors never pass
for the fp32 model's; an fp32 encoder's fingerprint is what it was before precisions existed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

import torch

from dclr.models.encoder import SentenceEncoder, model_limit

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

# Hex digits shown to people; the full digest is stored and compared.
SHORT = 12


def model_fingerprint(encoder: SentenceEncoder) -> str:
    """sha256 hex digest over weights, tokenizer vocabulary and settings."""
    digest = hashlib.sha256()
    tokenizer = encoder.tokenizer
    settings = {
        "backbone": type(encoder.backbone).__name__,
        "pooler": encoder.inference_pooler,
        "max_length": encoder.max_length or model_limit(tokenizer),
        "tokenizer": type(tokenizer).__name__,
        "lowercase": getattr(tokenizer, "do_lower_case", None),
    }
    if encoder.precision != "fp32":  # absent for fp32: existing fingerprints stay valid
        settings["precision"] = encoder.precision
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name, value in sorted(encoder.backbone.state_dict().items()):
        for part, tensor in _tensors(name, value):
            data = tensor.detach().cpu().contiguous().reshape(-1)
            digest.update(f"{part}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
            digest.update(cast("ReadableBuffer", data.view(torch.uint8).numpy()))  # an ndarray
    vocab = sorted(tokenizer.get_vocab().items())
    digest.update(json.dumps(vocab, ensure_ascii=False).encode())
    return digest.hexdigest()


def _tensors(name: str, value: object) -> Iterator[tuple[str, torch.Tensor]]:
    """Plain tensors of a state-dict entry: itself, or a quantised layer's parts (its packed
    (weight, bias) tuple; a quantised weight as int8 values + per-channel scales + zero points)."""
    if isinstance(value, tuple | list):
        for i, item in enumerate(value):
            yield from _tensors(f"{name}.{i}", item)
    elif isinstance(value, torch.dtype):
        yield f"{name}={value}", torch.zeros(0)
    elif isinstance(value, torch.Tensor) and value.is_quantized:
        yield f"{name}.int", value.int_repr()
        if value.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
            yield f"{name}.scales", value.q_per_channel_scales()
            yield f"{name}.zero_points", value.q_per_channel_zero_points()
        else:
            yield f"{name}.scale", torch.tensor([value.q_scale()])
            yield f"{name}.zero_point", torch.tensor([value.q_zero_point()])
    elif isinstance(value, torch.Tensor):
        yield name, value
