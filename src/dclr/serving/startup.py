"""What `dclr serve` does before it listens: load the encoder (and the index), build the app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dclr.serving.settings import ServeSettings

if TYPE_CHECKING:
    from fastapi import FastAPI


def load_app(model: str, settings: ServeSettings) -> FastAPI:
    """The service for `model` (a folder, hub id or python-package:NAME) under `settings`: the
    encoder on its device, packed on the CPU (padding-free, as `dclr encode`; a GPU runs padded
    batches fast), the index checked against the model's fingerprint."""
    from dclr.indexing.bulk import pick_device
    from dclr.indexing.fingerprint import model_fingerprint
    from dclr.indexing.index import SearchIndex
    from dclr.models.precision import load_inference_encoder
    from dclr.models.resolve import served_name
    from dclr.serving.service import create_app

    served = settings.served
    target = pick_device(served.device, 0)  # type: ignore[arg-type]
    encoder = load_inference_encoder(
        model, served.pooler, served.precision, target.type == "cpu", target
    )
    fingerprint = model_fingerprint(encoder)
    searcher = SearchIndex(served.index) if served.index is not None else None
    if searcher is not None:
        searcher.check_model(fingerprint, model)
    name = served.served_model_name or served_name(model)
    return create_app(encoder, name, fingerprint, searcher, settings)
