"""A model's fingerprint: a hash of what decides its vectors, so saved vectors name their model.

Two encoders get the same fingerprint exactly when they hold the same backbone weights (names,
dtypes, shapes, bytes), the same tokenizer vocabulary and casing, the same pooler and the same
maximum length. The folder path does not enter, so a copied or renamed model still matches, and a
retrained one in the same folder does not.
"""

from __future__ import annotations

import hashlib
import json

import torch

from dclr.models.encoder import SentenceEncoder, model_limit

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
    digest.update(json.dumps(settings, sort_keys=True).encode())
    for name, tensor in sorted(encoder.backbone.state_dict().items()):
        data = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}".encode())
        digest.update(data.view(torch.uint8).numpy())
    vocab = sorted(tokenizer.get_vocab().items())  # type: ignore[attr-defined]
    digest.update(json.dumps(vocab, ensure_ascii=False).encode())
    return digest.hexdigest()
