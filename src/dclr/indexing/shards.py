"""Vector shards on disk: `shard-NNNNN.npy` (+ `.rows.npy`) or `shard-NNNNN.parquet`.

A shard holds the vectors of one block of input rows and the row numbers they came from (blank
rows have no vector). Each file is written under a temporary name, flushed to disk and renamed into
place; then `shard-NNNNN.done.json` records each file's size and sha256. That record, written
last, is what marks the shard done: a shard file without it (a crash between the renames, a shard
from before records existed) or whose size or checksum no longer matches (a torn or emptied file)
is not done, and a resumed job encodes it again. Nothing is ever loaded with pickle
(`np.load(..., allow_pickle=False)`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from dclr import atomic
from dclr.errors import InputError

ShardFormat = Literal["npy", "parquet"]
StorageDtype = Literal["float32", "float16"]


def check_choice(value: str, allowed: object, option: str) -> str:  # allowed: a Literal[...]
    """Raise InputError unless `value` is one of the Literal `allowed`; `option` names it as the
    command line does, with its Python keyword in brackets ("--format (shard_format=)")."""
    if value not in get_args(allowed):
        first = get_args(allowed)[0]
        flag, _, keyword = option.partition(" (")
        python = f" ({keyword.rstrip(')')}{first!r})" if keyword else ""
        raise InputError(
            f"{option} must be one of {', '.join(get_args(allowed))}, got {value!r}",
            fix=f"pass {flag} {first}{python}",
        )
    return value


def shard_name(index: int, fmt: ShardFormat) -> str:
    """The file that marks shard `index` as done (the vectors file)."""
    return f"shard-{index:05d}.{fmt}"


def _rows_name(index: int) -> str:
    return f"shard-{index:05d}.rows.npy"


def record_name(index: int) -> str:
    """The shard's done-record: sizes and checksums of its files, written last."""
    return f"shard-{index:05d}.done.json"


def shard_files(index: int, fmt: ShardFormat) -> list[str]:
    return [shard_name(index, fmt), _rows_name(index)] if fmt == "npy" else [shard_name(index, fmt)]


def read_record(folder: Path, index: int) -> dict[str, Any] | None:
    try:
        record = json.loads((folder / record_name(index)).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) and "files" in record else None


def shard_problem(folder: Path, index: int, fmt: ShardFormat, hash_: bool = False) -> str | None:
    """Why shard `index` is not done ("FILE: reason"), or None. `hash_` checks the sha256 too."""
    record = read_record(folder, index)
    if record is None:
        return f"{folder / record_name(index)}: missing or unreadable (the shard never finished)"
    for name in shard_files(index, fmt):
        problem = atomic.check_file(folder / name, record["files"].get(name, {}), hash_)
        if problem:
            return f"{folder / name}: {problem}"
    return None


def is_done(folder: Path, index: int, fmt: ShardFormat) -> bool:
    """The shard's files are all there, at the sizes its done-record gives."""
    return shard_problem(folder, index, fmt) is None


def remove_shard(folder: Path, index: int) -> None:
    """Delete every file of shard `index` (its record first, so it is never half done)."""
    (folder / record_name(index)).unlink(missing_ok=True)
    for fmt in get_args(ShardFormat):
        for name in shard_files(index, fmt):
            (folder / name).unlink(missing_ok=True)


def _atomic(path: Path, write: object) -> None:
    """Call write(tmp_path), fsync it, then rename tmp_path to path."""
    atomic.write_with(path, write)  # type: ignore[arg-type]


def write_shard(
    folder: Path,
    index: int,
    rows: np.ndarray,
    vectors: np.ndarray,
    fmt: ShardFormat,
    dtype: StorageDtype,
) -> Path:
    """Write (m,) int64 row numbers and (m, d) vectors (cast to `dtype`) as shard `index`."""
    rows = np.asarray(rows, dtype=np.int64)
    vectors = np.ascontiguousarray(vectors, dtype=np.dtype(dtype))
    if vectors.ndim != 2 or len(rows) != len(vectors):
        raise ValueError(f"rows {rows.shape} and vectors {vectors.shape} do not match")
    target = folder / shard_name(index, fmt)
    with atomic.storage_guard(target, needed=rows.nbytes + vectors.nbytes):
        _write_shard_files(folder, index, rows, vectors, fmt)
    record = {
        "rows": len(rows),
        "files": {name: atomic.file_record(folder / name) for name in shard_files(index, fmt)},
    }
    atomic.write_text(folder / record_name(index), json.dumps(record) + "\n")
    return target


def _write_shard_files(
    folder: Path, index: int, rows: np.ndarray, vectors: np.ndarray, fmt: ShardFormat
) -> None:
    target = folder / shard_name(index, fmt)
    if fmt == "npy":
        # rows first: the vectors file is the done-marker, so it must land last.
        atomic.write_array(folder / _rows_name(index), rows)
        atomic.write_array(target, vectors)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        flat = pa.array(vectors.reshape(-1))  # (m*d,)
        table = pa.table(
            {
                "row": pa.array(rows, pa.int64()),
                "embedding": pa.FixedSizeListArray.from_arrays(flat, vectors.shape[1]),
            }
        )
        _atomic(target, lambda p: pq.write_table(table, p))


def read_shard(folder: Path, index: int, fmt: ShardFormat) -> tuple[np.ndarray, np.ndarray]:
    """(rows (m,) int64, vectors (m, d)) of one shard, in its stored dtype."""
    path = folder / shard_name(index, fmt)
    if not path.is_file():
        raise InputError("shard missing", path=path, fix="run the bulk encoding again to resume")
    try:
        if fmt == "npy":
            vectors = np.load(path, allow_pickle=False)
            rows = np.load(folder / _rows_name(index), allow_pickle=False)
            return rows, vectors
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        column = table.column("embedding").combine_chunks()
        dim = column.type.list_size
        vectors = column.flatten().to_numpy(zero_copy_only=False).reshape(-1, dim)  # (m, d)
        return table.column("row").to_numpy(), vectors
    except (OSError, ValueError, EOFError) as err:
        raise InputError(
            f"damaged shard ({type(err).__name__}: {err})",
            path=path,
            fix="run the same command again: damaged shards are encoded again",
        ) from None


def iter_shards(
    folder: Path, n_shards: int, fmt: ShardFormat, verify: bool = False
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every shard in order: (rows, vectors). `verify`: each shard's files are first checked
    against its done-record (size and sha256), so bytes changed on disk are named, not read."""
    for index in range(n_shards):
        if verify:
            problem = shard_problem(folder, index, fmt, hash_=True)
            if problem is not None:
                raise InputError(
                    f"shard {index} fails its check: {problem}",
                    path=folder,
                    fix="run the same `dclr encode-bulk` again on this folder: a damaged shard "
                    "is encoded again",
                )
        yield read_shard(folder, index, fmt)
