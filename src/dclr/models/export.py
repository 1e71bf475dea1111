"""Save an encoder as one folder that is both a Hugging Face model and a sentence-transformers model.

Layout: config.json + model.safetensors + tokenizer files (plain HF, `AutoModel.from_pretrained`),
modules.json + 1_Pooling/ + sentence_bert_config.json (stock `Transformer` + `Pooling` modules, so
`SentenceTransformer(path)` works with no custom code), dclr.json (pooler, max length, dimension)
and README.md, the model card (`dclr.models.card`). Training-only parts (the MLP head) are never
written. The folder appears atomically.

A starting model whose pipeline ends in `Normalize` (all-MiniLM-L6-v2) gives an export that ends
in it too, as sentence-transformers' own fine-tuning keeps it: unit vectors from
`SentenceTransformer(path)` and from dclr (`SentenceEncoder.normalizes`).

`max_seq_length` is the backbone's own limit (all-MiniLM-L6-v2: 256, from its sentence-transformers
config), not the training length (SimCSE trains on 32 tokens) nor the position table (512).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from dclr.atomic import staged_folder, storage_guard
from dclr.models.card import CARD_FILE, CardFacts, write_card
from dclr.models.encoder import DCLR_CONFIG, SentenceEncoder, folder_limit

# dclr pooler -> sentence-transformers Pooling mode (stock modules only).
ST_POOLING_MODE = {
    "mean": "mean",
    "cls_before_pooler": "cls",
    "avg_first_last": "mean",
    "avg_top2": "mean",
}
# Layer-averaging poolers become a stock WeightedLayerPooling (weights 1 on the two layers averaged,
# 0 elsewhere) in front of mean pooling; the saved config asks the backbone for hidden states.
LAYER_AVERAGING = ("avg_first_last", "avg_top2")


def save_encoder(encoder: SentenceEncoder, path: str | Path, extra: dict | None = None) -> Path:
    """Write `encoder` to `path` (replacing it atomically) and return the path."""
    path = Path(path)
    weights = sum(t.numel() * t.element_size() for t in encoder.state_dict().values())
    with storage_guard(path, needed=weights), staged_folder(path) as tmp:
        _write_encoder(encoder, tmp, shown_as=path, extra=extra)
    return path


def link_export(source: str | Path, path: str | Path) -> Path:
    """Make `path` (a run's best/) the model already exported to `source` (its final/) without a
    second copy of the weights: each file a hard link to `source`'s, the card a copy that names
    `path`. Both stay real folders, so `SentenceTransformer(path)` and `AutoModel` load either on
    every OS, and deleting one leaves the other whole (a symlink or a pointer file would need
    privileges on Windows or code to follow it). A file system without hard links gets copies.
    Exports never rewrite a file in place (every write replaces it), so the two cannot diverge
    by a write through one name. The folder appears atomically, as `save_encoder`'s does."""
    source, path = Path(source), Path(path)
    with staged_folder(path) as tmp:
        for file in sorted(source.rglob("*")):
            target = tmp / file.relative_to(source)
            if file.is_dir():
                target.mkdir(parents=True, exist_ok=True)
            elif file.relative_to(source) == Path(CARD_FILE):
                # the card's examples load `path/to/<folder name>` (`write_card`)
                card = file.read_text(encoding="utf-8")
                target.write_text(
                    card.replace(f"path/to/{source.name}", f"path/to/{path.name}"), "utf-8"
                )
            else:
                try:
                    os.link(file, target)
                except OSError:  # FAT, some network shares: no hard links
                    shutil.copy2(file, target)
    return path


def _write_encoder(encoder: SentenceEncoder, tmp: Path, shown_as: Path, extra: dict | None) -> None:
    """Fill the empty folder `tmp` with the model files; `shown_as` is the name the card gives."""
    pooler = encoder.inference_pooler
    max_length = encoder.max_length or backbone_limit(encoder)
    encoder.backbone.save_pretrained(tmp, safe_serialization=True)
    encoder.tokenizer.save_pretrained(tmp)
    if pooler in LAYER_AVERAGING:
        config_path = tmp / "config.json"
        config = json.loads(config_path.read_text())
        config["output_hidden_states"] = True
        config_path.write_text(json.dumps(config, indent=2) + "\n")
    if pooler in ST_POOLING_MODE:
        layers = int(encoder.backbone.config.num_hidden_layers)
        _write_sentence_transformers(
            tmp,
            ST_POOLING_MODE[pooler],
            encoder.hidden_size,
            max_length,
            layer_weights=_layer_weights(pooler, layers),
            normalize=encoder.normalizes,
        )
    info = {
        "pooler": pooler,
        "max_length": max_length,
        "format": "dclr-1",
        "dimension": encoder.hidden_size,
        "sentence_transformers": pooler in ST_POOLING_MODE,
        # the starting model's pipeline ended in Normalize: so does this one (absent: it did not)
        **({"normalize": True} if encoder.normalizes else {}),
        **(extra or {}),
    }
    (tmp / DCLR_CONFIG).write_text(json.dumps(info, indent=2) + "\n")
    source = str(getattr(encoder.backbone.config, "_name_or_path", "") or "") or None
    facts = CardFacts(
        base_model=info.get("base_model", source),
        pooler=pooler,
        max_seq_length=max_length,
        dimension=encoder.hidden_size,
        normalized=encoder.normalizes,
        steps=info.get("step"),
    )
    write_card(tmp, facts, shown_as=shown_as)


def backbone_limit(encoder: SentenceEncoder) -> int:
    """The longest input the backbone was trained for: what its source folder's
    sentence-transformers config (or dclr.json) records, else the tokenizer's limit capped by
    BERT's position table (`model_limit`)."""
    source = str(getattr(encoder.backbone.config, "_name_or_path", "") or ".")
    return folder_limit(source, encoder.tokenizer)


def st_modules() -> tuple[type, type, type, type]:
    """(Transformer, Pooling, WeightedLayerPooling, Normalize) from sentence-transformers' current
    import path; `sentence_transformers.models` (deprecated in 6.x) only for releases before it."""
    try:
        from sentence_transformers.sentence_transformer.modules import (
            Normalize,
            Pooling,
            Transformer,
            WeightedLayerPooling,
        )
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import (  # type: ignore[no-redef]  # same classes, old path
            Normalize,
            Pooling,
            Transformer,
            WeightedLayerPooling,
        )
    return Transformer, Pooling, WeightedLayerPooling, Normalize


def _layer_weights(pooler: str, layers: int) -> tuple[int, list[float]] | None:
    """(layer_start, weights) over hidden_states[layer_start:] (index 0 = embeddings)."""
    if pooler == "avg_first_last":  # hidden_states[1] and hidden_states[-1]
        return 1, [1.0] + [0.0] * (layers - 2) + [1.0]
    if pooler == "avg_top2":  # hidden_states[-2] and hidden_states[-1]
        return layers - 1, [1.0, 1.0]
    return None


def _write_sentence_transformers(
    folder: Path,
    mode: str,
    dim: int,
    max_length: int,
    layer_weights: tuple[int, list[float]] | None = None,
    normalize: bool = False,
) -> None:
    """Add the stock sentence-transformers module files, built by sentence-transformers itself;
    with `normalize`, a `Normalize` module last (the starting model's pipeline had one)."""
    import torch
    from sentence_transformers import SentenceTransformer

    Transformer, Pooling, WeightedLayerPooling, Normalize = st_modules()

    modules: list[torch.nn.Module] = [Transformer(str(folder), max_seq_length=max_length)]
    if layer_weights is not None:
        start, weights = layer_weights
        modules.append(
            WeightedLayerPooling(
                dim,
                num_hidden_layers=start + len(weights) - 1,
                layer_start=start,
                layer_weights=torch.nn.Parameter(torch.tensor(weights), requires_grad=False),
            )
        )
    modules.append(Pooling(dim, pooling_mode=mode))
    if normalize:
        modules.append(Normalize())
    # The card is dclr's (written after this); sentence-transformers' generic one is not made.
    SentenceTransformer(modules=modules, device="cpu").save(str(folder), create_model_card=False)
