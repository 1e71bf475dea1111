"""Vector shards on disk: `shard-NNNNN.npy` (+ `.rows.npy`) or `shard-NNNNN.parquet`.

A shard holds the vectors of one block of input rows and the row numbers they came from (blank
rows have no vector). Each file is written under a temporary name and renamed into place, so a
shard either exists whole or not at all: that is what makes bulk encoding resumable. Nothing is
ever loaded with pickle (`np.load(..., allow_pickle=False)`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from dclr.errors import InputError

ShardFormat = Literal["npy", "parquet"]
StorageDtype = Literal["float32", "float16"]


def check_choice(value: str, allowed: type, option: str) -> str:
    """Raise InputError unless `value` is one of the Literal `allowed`."""
    if value not in get_args(allowed):
        raise InputError(
            f"{option} must be one of {', '.join(get_args(allowed))}, got {value!r}",
            fix=f"pass {option} {get_args(allowed)[0]}",
        )
    return value


def shard_name(index: int, fmt: ShardFormat) -> str:
    """The file that marks shard `index` as done (the vectors file)."""
    return f"shard-{index:05d}.{fmt}"


def _rows_name(index: int) -> str:
    return f"shard-{index:05d}.rows.npy"


def is_done(folder: Path, index: int, fmt: ShardFormat) -> bool:
    return (folder / shard_name(index, fmt)).is_file()


def _atomic(path: Path, write: object) -> None:
    """Call write(tmp_path), then rename tmp_path to path."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)  # type: ignore[operator]
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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
    if fmt == "npy":
        # rows first: the vectors file is the done-marker, so it must land last.
        _atomic(folder / _rows_name(index), lambda p: _save_npy(p, rows))
        _atomic(target, lambda p: _save_npy(p, vectors))
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
    return target


def _save_npy(path: Path, array: np.ndarray) -> None:
    with path.open("wb") as fh:
        np.save(fh, array, allow_pickle=False)


def read_shard(folder: Path, index: int, fmt: ShardFormat) -> tuple[np.ndarray, np.ndarray]:
    """(rows (m,) int64, vectors (m, d)) of one shard, in its stored dtype."""
    path = folder / shard_name(index, fmt)
    if not path.is_file():
        raise InputError("shard missing", path=path, fix="run the bulk encoding again to resume")
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


def iter_shards(
    folder: Path, n_shards: int, fmt: ShardFormat
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every shard in order: (rows, vectors)."""
    for index in range(n_shards):
        yield read_shard(folder, index, fmt)
