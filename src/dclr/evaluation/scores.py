"""STS test scores of a saved model, and the cache of starting-model scores (one per model)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from dclr import atomic
from dclr._meta import __version__
from dclr.errors import ConfigError
from dclr.evaluation.sts import StsEvaluator
from dclr.models.encoder import SentenceEncoder


def evaluation_encoder(path: str, pooler: str) -> SentenceEncoder:
    """The model at `path` for test evaluation: on the GPU when there is one (padded batches, a
    larger batch), else on the CPU with packed forwards, as the recorded CPU figures were made."""
    from dclr.models.precision import inference_device

    device = inference_device("auto")
    encoder = SentenceEncoder.from_pretrained(path, pooler=pooler, packing=device.type == "cpu")
    return encoder.to(device)


def evaluation_batch_size(encoder: SentenceEncoder) -> int:
    """Sentences per forward in evaluation: 128 on the CPU (its recorded figures), 512 on a GPU,
    where a batch of 128 short STS sentences is too small to keep it busy."""
    return 512 if encoder.device.type == "cuda" else 128


def evaluate_model(
    path: str, pooler: str, data_dir: str | None, label: str = "encode STS"
) -> dict[str, float]:
    """The 7-task STS test table of the model at `path` (`evaluation_encoder`); `label` names
    the progress bar."""
    encoder = evaluation_encoder(path, pooler)
    size = evaluation_batch_size(encoder)
    return StsEvaluator(data_dir, mode="test")(
        lambda s: encoder.encode(
            s, batch_size=size, normalize=False, show_progress=True, progress_label=label
        )
    )


def sts_scores_key(model: str, pooler: str, data_dir: str | None) -> str:
    """The cache key of the STS scores of (model, pooler, data): the spec, the resolved data
    folder, and the name, size and mtime of every file of a local model folder (so a retrained
    folder under the same path gets a new key). Hub ids are keyed by their name only.
    (Not `dclr.indexing.fingerprint.model_fingerprint`, which identifies an encoder's vectors.)"""
    from dclr.data.paths import resolve_data_dir

    return scores_key(model, pooler, str(resolve_data_dir(data_dir).resolve()))


def scores_key(model: str, pooler: str, *data: str) -> str:
    """`sts_scores_key` with the data named by the caller (e.g. a retrieval folder's files)."""
    from dclr.models.resolve import resolve_model

    parts = [__version__, model, pooler, *data]
    folder = Path(resolve_model(model))
    if folder.is_dir():
        parts += folder_stats(folder)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def folder_stats(folder: Path) -> list[str]:
    """name:size:mtime of every file under `folder`, sorted (changes when a file does)."""
    out = []
    for file in sorted(f for f in folder.rglob("*") if f.is_file()):
        stat = file.stat()
        out.append(f"{file.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}")
    return out


def starting_scores(
    model: str, pooler: str, data_dir: str | None, cache_root: Path | None = None
) -> dict[str, float]:
    """STS test scores of the starting model, cached under `~/.cache/dclr/starting-scores/`:
    every run of an experiment starts from the same few models, so each is evaluated once."""
    cached = cached_starting_scores(model, pooler, data_dir, cache_root)
    if cached is not None:
        return cached
    scores = evaluate_model(model, pooler, data_dir, label="encode STS (before: starting model)")
    save_starting_scores(model, pooler, data_dir, scores, cache_root)
    return scores


def _scores_file(model: str, pooler: str, data_dir: str | None, cache_root: Path | None) -> Path:
    from dclr.data.paths import default_cache_dir

    root = cache_root or default_cache_dir().parent / "starting-scores"
    return root / f"{sts_scores_key(model, pooler, data_dir)}.json"


def cached_starting_scores(
    model: str, pooler: str, data_dir: str | None, cache_root: Path | None = None
) -> dict[str, float] | None:
    """The cached starting scores of (model, pooler, data), or None."""
    cache = _scores_file(model, pooler, data_dir, cache_root)
    return json.loads(cache.read_text()) if cache.is_file() else None


def save_starting_scores(
    model: str,
    pooler: str,
    data_dir: str | None,
    scores: dict[str, float],
    cache_root: Path | None = None,
) -> None:
    cache = _scores_file(model, pooler, data_dir, cache_root)
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(cache, json.dumps(scores, indent=2) + "\n")  # two writers never share a temp


def checked_batch_size(batch_size: int | None) -> int | None:
    """`batch_size` when it is None (the default: `evaluation_batch_size`) or >= 1; else a
    ConfigError (0 silently meant the default)."""
    if batch_size is not None and batch_size < 1:
        raise ConfigError(f"batch_size (--batch-size) must be >= 1, got {batch_size}")
    return batch_size
