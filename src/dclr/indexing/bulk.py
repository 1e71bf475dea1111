"""Bulk encoding: a large file -> vector shards, streaming, resumable, in one or more processes.

Input rows are cut into fixed blocks of `shard_size` rows; block k becomes shard k (blank rows
skipped, their row numbers absent from the shard). Because a shard is a function of the input alone,
its vectors do not depend on how many processes ran, and a job killed midway resumes by encoding
only the shards whose files are missing. With N processes (`processes=N`, through
`torch.multiprocessing`, or N ranks under `torchrun`) process r encodes the shards k with
k % N == r, each on its own GPU when there are GPUs. `manifest.json` records the model (spec and
fingerprint), the input (path, size, mtime), the settings, and whether every shard is done (with
each shard's file sizes and checksums once complete); a resumed job with a different model, input or
setting is refused. A shard counts as done only when its done-record matches its files (see
`dclr.indexing.shards`): a resumed job checks every existing shard's checksums and encodes a damaged
one again, naming it. The output folder is locked for the job (`dclr.runlock`): a second job into it
is refused, naming the first.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import torch
from tqdm.auto import tqdm

from dclr import atomic
from dclr.data.readers import TextSource, is_blank
from dclr.errors import ConfigError, DclrError, InputError
from dclr.heap import trim_heap
from dclr.indexing.fingerprint import model_fingerprint
from dclr.indexing.shards import (
    ShardFormat,
    StorageDtype,
    check_choice,
    is_done,
    read_record,
    remove_shard,
    shard_name,
    shard_problem,
    write_shard,
)
from dclr.jsonfile import read_json
from dclr.models.encoder import SentenceEncoder
from dclr.models.precision import load_inference_encoder
from dclr.progress import progress_bar
from dclr.runlock import FolderLock

MANIFEST = "manifest.json"
FORMAT_VERSION = "dclr-bulk-1"
# Rows per shard: 10k x 384-d float32 = 15 MB per shard, small enough to redo after a kill.
DEFAULT_SHARD_SIZE = 10_000
# Texts handed to `encode` at once (a multiple of the batch size): the progress bar's step, and
# large enough for the length sorting inside `encode` to cut padding.
CHUNK_BATCHES = 8
Device = Literal["auto", "cpu", "cuda"]
# Manifest keys that must match for a job to resume into an existing folder.
_RESUME_KEYS = ("format", "model_fingerprint", "input", "shard_size", "shard_format", "dtype")


@dataclass(frozen=True)
class BulkSettings:
    """How vectors are written.

    shard_size: input rows per shard; shard_format: "npy" (vectors + `.rows.npy`) or "parquet"
    (columns `row`, `embedding`); dtype: storage dtype ("float16" halves the disk, the model still
    runs in float32); normalize: L2-normalise before storing (None: as the model's
    sentence-transformers pipeline does, `SentenceEncoder.normalizes`; the manifest records what
    was done); batch_size: texts per forward pass.
    """

    shard_size: int = DEFAULT_SHARD_SIZE
    shard_format: ShardFormat = "npy"
    dtype: StorageDtype = "float32"
    normalize: bool | None = False
    batch_size: int = 128

    def __post_init__(self) -> None:
        if self.shard_size < 1 or self.batch_size < 1:
            raise ConfigError("shard_size and batch_size must be >= 1")
        check_choice(self.shard_format, ShardFormat, "--format (shard_format=)")
        check_choice(self.dtype, StorageDtype, "--dtype (dtype=)")


def read_manifest(out_dir: Path) -> dict[str, Any] | None:
    """The job's manifest.json, None before the job writes one; a damaged one is named."""
    path = Path(out_dir) / MANIFEST
    if not path.is_file():
        return None
    fix = (
        "delete manifest.json and run the same `dclr encode-bulk` again: finished shards are "
        "checked and kept"
    )
    manifest = read_json(path, fix)
    if not isinstance(manifest.get("n_shards"), int) or "shard_format" not in manifest:
        raise InputError("manifest.json lacks n_shards / shard_format", path=path, fix=fix)
    return cast(dict[str, Any], manifest)


class DamagedShardWarning(UserWarning):
    """An existing shard failed its check and is encoded again; the message names the file."""


def _write_manifest(out_dir: Path, manifest: dict[str, Any]) -> None:
    atomic.write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")


def plan(
    out_dir: Path,
    model: str,
    fingerprint: str,
    pooler: str,
    source: TextSource,
    settings: BulkSettings,
    overwrite: bool = False,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Create the manifest in `out_dir`, or check an existing one matches (to resume).

    The fingerprint already tells precisions apart; `precision` is recorded for people."""
    out_dir.mkdir(parents=True, exist_ok=True)
    n_rows = source.count()
    manifest: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "model": model,
        "model_fingerprint": fingerprint,
        "pooler": pooler,
        "precision": precision,
        "input": source.identity(),
        "rows": n_rows,
        "n_shards": -(-n_rows // settings.shard_size),  # ceil
        **asdict(settings),
        "complete": False,
    }
    old = read_manifest(out_dir)
    if old is not None and overwrite:
        _remove_outputs(out_dir, old)
        old = None
    if old is not None:
        changed = [key for key in (*_RESUME_KEYS, "normalize") if old.get(key) != manifest[key]]
        if changed:
            state = "a finished" if old.get("complete") else "an unfinished"
            raise InputError(
                f"this folder holds the vectors of {state} job with another "
                f"{'; another '.join(describe_change(key, old, manifest) for key in changed)}",
                path=out_dir / MANIFEST,
                fix="pass --overwrite to replace them (only this job's files are deleted), or "
                "use another output folder",
            )
        manifest = {**old, "batch_size": settings.batch_size}
    _write_manifest(out_dir, manifest)
    return manifest


def describe_change(key: str, old: dict[str, Any], new: dict[str, Any]) -> str:
    """What a manifest key's change means, in words (`dclr index build` on a folder whose
    vectors came from another model or another version of the input)."""
    if key == "model_fingerprint":
        return f"model (weights, pooler or precision: it was {old.get('model')})"
    if key == "input":
        before, now = old.get("input") or {}, new["input"]
        if before.get("path") != now.get("path"):
            return f"input file (it was {before.get('path')})"
        if before.get("column") != now.get("column") or before.get("format") != now.get("format"):
            return "input column or format"
        return f"version of {now.get('path')} (its size or modification time changed)"
    return f"{key} (it was {old.get(key)!r})"


def _remove_outputs(out_dir: Path, manifest: dict[str, Any]) -> None:
    """Delete this job's own files only (never the folder or anything else in it)."""
    (out_dir / MANIFEST).unlink(missing_ok=True)
    for index in range(int(manifest.get("n_shards", 0))):
        remove_shard(out_dir, index)


def pending_shards(out_dir: Path, manifest: dict[str, Any], rank: int, world: int) -> list[int]:
    """Shards this rank owns (k % world == rank) that are not done and intact.

    Every existing shard's files are checked against their done-record (sizes and sha256); a
    damaged shard is reported (DamagedShardWarning), deleted, and encoded again.
    """
    fmt = manifest["shard_format"]
    todo = []
    for k in range(rank, manifest["n_shards"], world):
        problem = shard_problem(out_dir, k, fmt, hash_=True)
        if problem is None:
            continue
        if read_record(out_dir, k) is not None or (out_dir / shard_name(k, fmt)).exists():
            warnings.warn(f"encoding shard {k} again: {problem}", DamagedShardWarning, stacklevel=2)
        remove_shard(out_dir, k)
        todo.append(k)
    return todo


def encode_shards(
    encoder: SentenceEncoder,
    source: TextSource,
    out_dir: Path,
    manifest: dict[str, Any],
    rank: int = 0,
    world: int = 1,
    show_progress: bool = False,
) -> int:
    """Encode this rank's missing shards, streaming the input once; returns texts encoded."""
    todo = set(pending_shards(out_dir, manifest, rank, world))
    if not todo:
        return 0
    size, n_rows = manifest["shard_size"], manifest["rows"]
    total = sum(min(size, n_rows - k * size) for k in todo)
    bar = progress_bar(
        total=total,
        desc=f"encode (rank {rank})" if world > 1 else "encode",
        unit="row",
        position=rank,
        enabled=show_progress,
    )
    last_row = (max(todo) + 1) * size  # nothing past this row is ours
    rows: list[int] = []
    texts: list[str] = []
    current = 0
    encoded = 0
    for row, text in enumerate(source.rows()):
        if row >= last_row:
            break
        shard = row // size
        if shard != current:
            if current in todo:
                encoded += _finish(encoder, out_dir, current, rows, texts, manifest, bar)
            rows, texts, current = [], [], shard
        if shard in todo and not is_blank(text):
            rows.append(row)
            texts.append(text)
    if current in todo:
        encoded += _finish(encoder, out_dir, current, rows, texts, manifest, bar)
    bar.close()
    return encoded


def _finish(
    encoder: SentenceEncoder,
    out_dir: Path,
    shard: int,
    rows: list[int],
    texts: list[str],
    manifest: dict[str, Any],
    bar: tqdm,
) -> int:
    """Encode one shard's texts chunk by chunk and write the shard."""
    batch = manifest["batch_size"]
    chunk = batch * CHUNK_BATCHES
    parts = [np.empty((0, encoder.hidden_size), dtype=np.float32)]
    for start in range(0, len(texts), chunk):
        part = texts[start : start + chunk]
        parts.append(encoder.encode(part, batch_size=batch, normalize=manifest["normalize"]))
        bar.update(len(part))
    n_rows = min(manifest["shard_size"], manifest["rows"] - shard * manifest["shard_size"])
    bar.update(n_rows - len(texts))  # the blank rows
    vectors = np.concatenate(parts)  # (m, d)
    write_shard(
        out_dir, shard, np.asarray(rows), vectors, manifest["shard_format"], manifest["dtype"]
    )
    trim_heap()  # varied batch shapes fragment the heap (see dclr.heap)
    return len(texts)


def finalize(out_dir: Path) -> dict[str, Any]:
    """Mark the job complete once every shard exists; record the count and the dimension."""
    from dclr.indexing.shards import read_shard

    manifest = read_manifest(out_dir)
    if manifest is None:
        raise InputError("no bulk job here (manifest.json missing)", path=out_dir)
    fmt = manifest["shard_format"]
    missing = [k for k in range(manifest["n_shards"]) if not is_done(out_dir, k, fmt)]
    if missing:
        raise InputError(
            f"{len(missing)} shard(s) missing, first {shard_name(missing[0], fmt)}",
            path=out_dir,
            fix="run the same command again to resume",
        )
    count, dim = 0, None
    records = []
    for k in range(manifest["n_shards"]):
        rows, vectors = read_shard(out_dir, k, fmt)
        count += len(rows)
        dim = int(vectors.shape[1]) if dim is None else dim
        records.append(read_record(out_dir, k))
    manifest.update(complete=True, vectors=count, dim=dim, shards=records)
    _write_manifest(out_dir, manifest)
    return manifest


def read_bulk(out_dir: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """A finished bulk job's vectors, in input order: (rows (n,) int64, the 0-based input row
    of each vector; vectors (n, d) in the stored dtype). Blank rows have no vector. A job not
    finished (no manifest, or not complete) is refused, naming the fix; each shard is checked as
    it is read."""
    from dclr.indexing.shards import iter_shards

    out_dir = Path(out_dir)
    manifest = read_manifest(out_dir)
    if manifest is None or not manifest.get("complete"):
        raise InputError(
            "no finished bulk job here"
            + (" (manifest.json missing)" if manifest is None else " (not complete)"),
            path=out_dir,
            fix="run `dclr encode-bulk MODEL INPUT DIR` (or dclr.encode_bulk) to finish it",
        )
    n_shards, fmt = manifest["n_shards"], manifest["shard_format"]
    parts = list(iter_shards(out_dir, n_shards, fmt, verify=True))
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty((0, manifest.get("dim") or 0))
    rows = np.concatenate([np.asarray(r, dtype=np.int64) for r, _ in parts])
    return rows, np.concatenate([v for _, v in parts])


def pick_device(device: Device, rank: int) -> torch.device:
    """`auto`: the rank's own GPU when there are GPUs, else the CPU."""
    check_choice(device, Device, "--device")
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("--device cuda, but no GPU is visible")
        return torch.device(f"cuda:{rank % torch.cuda.device_count()}")
    return torch.device("cpu")


def load_encoder(
    model: str, pooler: str | None, device: torch.device, precision: str = "fp32"
) -> SentenceEncoder:
    """The inference encoder on `device` at `precision` (see `dclr.models.precision`), packed on
    the CPU as `dclr encode` is: a padded batch costs its longest text's length in every row (one
    256-token text among 127 short ones: +350 MiB of activations for MiniLM, where the packed
    batch costs only its tokens; benchmarks/long_line_memory.py)."""
    return load_inference_encoder(model, pooler, precision, packing=True, device=device)


def _spawned_worker(
    rank: int,
    world: int,
    model: str,
    pooler: str | None,
    source: TextSource,
    out_dir: Path,
    device: Device,
    show_progress: bool,
    precision: str = "fp32",
) -> None:
    """One process of `bulk_encode(processes=N)` (torch.multiprocessing.spawn)."""
    target = pick_device(device, rank)
    if target.type == "cpu":  # share the cores instead of oversubscribing them
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    encoder = load_encoder(model, pooler, target, precision)
    manifest = read_manifest(out_dir)
    assert manifest is not None
    encode_shards(encoder, source, out_dir, manifest, rank, world, show_progress)


def for_model(settings: BulkSettings, encoder: SentenceEncoder) -> BulkSettings:
    """`settings` with `normalize` None resolved to what the model's pipeline does."""
    if settings.normalize is not None:
        return settings
    return replace(settings, normalize=encoder.normalizes)


def bulk_encode(
    model: str,
    source: TextSource,
    out_dir: str | Path,
    settings: BulkSettings,
    pooler: str | None = None,
    processes: int = 1,
    device: Device = "auto",
    overwrite: bool = False,
    show_progress: bool = False,
    precision: str = "fp32",
) -> dict[str, Any]:
    """Encode `source` into shards in `out_dir`; returns the final manifest.

    `precision` "int8" encodes with the dynamically quantised model (CPU only; its fingerprint
    differs from the fp32 model's, so a job cannot resume across precisions).

    Under `torchrun` (WORLD_SIZE > 1) every rank calls this; rank 0 plans and finalizes.
    Otherwise `processes` > 1 spawns that many workers with torch.multiprocessing.
    """
    from dclr import distributed

    out_dir = Path(out_dir)
    model = _stable_spec(model)
    if distributed.init_from_env():
        return _bulk_torchrun(
            model, source, out_dir, settings, pooler, device, overwrite, precision
        )
    if processes < 1:
        raise ConfigError("--processes must be >= 1")
    with FolderLock(out_dir, "dclr encode-bulk"):
        return _bulk_local(
            model,
            source,
            out_dir,
            settings,
            pooler,
            processes,
            device,
            overwrite,
            show_progress,
            precision,
        )


def _bulk_local(
    model: str,
    source: TextSource,
    out_dir: Path,
    settings: BulkSettings,
    pooler: str | None,
    processes: int,
    device: Device,
    overwrite: bool,
    show_progress: bool,
    precision: str = "fp32",
) -> dict[str, Any]:
    encoder = load_encoder(model, pooler, pick_device(device, 0), precision)
    settings = for_model(settings, encoder)
    plan(
        out_dir,
        model,
        model_fingerprint(encoder),
        encoder.inference_pooler,
        source,
        settings,
        overwrite,
        precision,
    )
    manifest = read_manifest(out_dir)
    assert manifest is not None
    if processes == 1:
        encode_shards(encoder, source, out_dir, manifest, show_progress=show_progress)
    else:
        import torch.multiprocessing as mp

        del encoder  # each worker loads its own copy
        mp.spawn(
            _spawned_worker,
            args=(processes, model, pooler, source, out_dir, device, show_progress, precision),
            nprocs=processes,
            join=True,
        )
    return finalize(out_dir)


def _bulk_torchrun(
    model: str,
    source: TextSource,
    out_dir: Path,
    settings: BulkSettings,
    pooler: str | None,
    device: Device,
    overwrite: bool,
    precision: str = "fp32",
) -> dict[str, Any]:
    import torch.distributed as dist

    from dclr import distributed

    rank, world = distributed.rank(), distributed.world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    encoder = load_encoder(model, pooler, pick_device(device, local_rank), precision)
    settings = for_model(settings, encoder)
    planned = torch.ones(1, dtype=torch.int64, device=_collective_device(encoder))
    error: DclrError | None = None
    lock = FolderLock(out_dir, "dclr encode-bulk (torchrun)")
    if rank == 0:
        fingerprint = model_fingerprint(encoder)
        try:
            lock.acquire()
            plan(
                out_dir,
                model,
                fingerprint,
                encoder.inference_pooler,
                source,
                settings,
                overwrite,
                precision,
            )
        except DclrError as err:  # tell the other ranks instead of leaving them at a barrier
            error = err
            planned.zero_()
            lock.release()
    dist.broadcast(planned, src=0)
    if error is not None:
        raise error
    if not planned.item():
        raise InputError("rank 0 could not start the job (its error says why)")
    manifest = read_manifest(out_dir)
    assert manifest is not None
    try:
        encode_shards(encoder, source, out_dir, manifest, rank, world)
        dist.barrier()
        result = finalize(out_dir) if rank == 0 else manifest
        dist.barrier()
    finally:
        lock.release()
    return result


def _collective_device(encoder: SentenceEncoder) -> torch.device:
    """Where collective tensors live: the GPU for NCCL, the CPU for gloo."""
    return encoder.device if encoder.device.type == "cuda" else torch.device("cpu")


def _stable_spec(model: str) -> str:
    """A model spec that names the same model from any working directory."""
    if model.startswith("python-package:"):
        return model
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model
