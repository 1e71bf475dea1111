"""Save an encoder as one folder that is both a Hugging Face model and a sentence-transformers model.

Layout: config.json + model.safetensors + tokenizer files (plain HF, `AutoModel.from_pretrained`),
modules.json + 1_Pooling/ + sentence_bert_config.json (stock `Transformer` + `Pooling` modules, so
`SentenceTransformer(path)` works with no custom code), and dclr.json (pooler, max length).
Training-only parts (the MLP head) are never written. The folder appears atomically.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from dclr.models.encoder import DCLR_CONFIG, SentenceEncoder, _model_limit

# dclr pooler -> sentence-transformers Pooling mode (stock modules only).
ST_POOLING_MODE = {"mean": "mean", "cls_before_pooler": "cls"}


def save_encoder(encoder: SentenceEncoder, path: str | Path, extra: dict | None = None) -> Path:
    """Write `encoder` to `path` (replacing it atomically) and return the path."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    pooler = encoder.inference_pooler
    max_length = encoder.max_length or _model_limit(encoder.tokenizer)
    encoder.backbone.save_pretrained(tmp, safe_serialization=True)
    encoder.tokenizer.save_pretrained(tmp)
    if pooler in ST_POOLING_MODE:
        _write_sentence_transformers(tmp, ST_POOLING_MODE[pooler], encoder.hidden_size, max_length)
    info = {
        "pooler": pooler,
        "max_length": max_length,
        "format": "dclr-1",
        "sentence_transformers": pooler in ST_POOLING_MODE,
        **(extra or {}),
    }
    (tmp / DCLR_CONFIG).write_text(json.dumps(info, indent=2) + "\n")
    old = path.with_name(path.name + ".old")
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    if old.exists():
        shutil.rmtree(old)
    return path


def _write_sentence_transformers(folder: Path, mode: str, dim: int, max_length: int) -> None:
    """Add the stock sentence-transformers module files, built by sentence-transformers itself."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.models import Pooling, Transformer

    transformer = Transformer(str(folder), max_seq_length=max_length)
    model = SentenceTransformer(
        modules=[transformer, Pooling(dim, pooling_mode=mode)], device="cpu"
    )
    model.save(str(folder))
