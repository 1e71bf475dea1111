"""A FAISS semantic-search index tied to the model that built it.

Vectors are L2-normalised, so inner product = cosine similarity. Kinds:

- `flat`: exact inner-product search (`IndexFlatIP`), the reference every other kind is measured
  against; `auto` picks it up to `EXACT_MAX_VECTORS` vectors;
- `hnsw`: a graph (`IndexHNSWFlat`, M links per node), the `auto` choice for larger corpora: no
  training, good recall at low latency, more memory;
- `ivf`: an inverted file (`IndexIVFFlat`, k-means cells, `nprobe` cells searched per query):
  less memory than HNSW, needs training on the corpus.

A folder holds `index.json` (model spec and fingerprint, kind and parameters, counts),
`vectors.faiss` (FAISS's own format), `texts.jsonl` (`{"id", "row", "text"}` per vector, in id
order) with `texts.offsets.npy` (byte offsets for random access), and `embeddings/` (the bulk
shards, so rebuilding with another kind does not re-encode). Loading checks the fingerprint of the
model that will encode queries: an index built with another model is refused.

Writing is atomic as a whole: the new files are built in a staging folder, `index.json` is removed,
the files are renamed into place, and a new `index.json` listing each file's size and sha256 is
written last, so a crash leaves either the old index, or no `index.json` (an error that says to
build again), never a mix. Loading checks the files' sizes and sha256 against that list (a
same-size file from another build, such as an int8 build's `vectors.faiss`, is refused; hashing
costs about a second per GB) and that
`vectors.faiss` holds the kind `index.json` names (an HNSW file under a flat `index.json` is an
error, not a silent search at default settings). `index.json` records a `build_id` (and
`built_at`), so a server can say which build it serves and whether the folder holds a newer one
(`SearchIndex.build`, `folder_build`). The folder is locked while an index is built
(`dclr.runlock`): a second writer is refused, naming the first. A build killed before it could
clean up leaves its `.staging-PID/` folder; the next build of that folder removes every one it
finds, under the lock, so never one that a live build holds.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import mmap
import os
import shutil
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

import numpy as np

from dclr import atomic
from dclr.data.readers import TextSource, is_blank
from dclr.errors import InputError
from dclr.jsonfile import read_json
from dclr.runlock import FolderLock

IndexKind = Literal["auto", "flat", "hnsw", "ivf"]
INDEX_META = "index.json"
INDEX_FILE = "vectors.faiss"
TEXTS = "texts.jsonl"
OFFSETS = "texts.offsets.npy"
EMBEDDINGS = "embeddings"
FORMAT_VERSION = "dclr-index-1"
# Up to here exact search is cheap (100k x 384 floats = 150 MB, a few ms per query on one core)
# and has perfect recall, so `auto` only goes approximate beyond it.
EXACT_MAX_VECTORS = 100_000
# An int8 model's weights are rounded for the CPU's int8 kernel (`dclr.models.static_int8`):
# the same model on a CPU without VNNI has another fingerprint than on one with it.
INT8_HINT = (
    "; an int8 index also needs the same int8 rounding, which follows this CPU's int8 kernel "
    "(`dclr cpu-policy`): build it on the kind of machine that queries it"
)
# k-means needs a few dozen points per cell to place centroids well (FAISS warns below 39).
IVF_MIN_POINTS_PER_CELL = 39
# The folder a build writes its files into before renaming them into place (+ the builder's pid).
STAGING_PREFIX = ".staging-"
# Hex digits of a build's id: 48 bits tell apart every rebuild of a folder.
BUILD_ID_CHARS = 12
# The files index.json lists (with size and sha256); index.json itself is written after them.
INDEX_FILES = (INDEX_FILE, TEXTS, OFFSETS)


@dataclass(frozen=True)
class IndexParams:
    """Index choice and its knobs.

    kind: see the module docstring; hnsw_m: links per node (more = better recall, more memory);
    ef_construction / ef_search: HNSW candidate-list sizes at build / query time (more = better
    recall, slower); ivf_nlist: IVF cells (None = 4 * sqrt(n), capped so each cell gets
    `IVF_MIN_POINTS_PER_CELL` training points); ivf_nprobe: cells searched per query.
    """

    kind: IndexKind = "auto"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    ivf_nlist: int | None = None
    ivf_nprobe: int = 16

    def __post_init__(self) -> None:
        if self.kind not in get_args(IndexKind):
            raise InputError(
                f"unknown index kind {self.kind!r}", fix=f"choose {', '.join(get_args(IndexKind))}"
            )
        for name in ("hnsw_m", "ef_construction", "ef_search", "ivf_nprobe"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1")
        if self.ivf_nlist is not None and self.ivf_nlist < 1:
            raise InputError("ivf_nlist must be >= 1")

    def resolve(self, n: int) -> IndexParams:
        """Fix `auto` and the IVF cell count for a corpus of n vectors."""
        kind = self.kind
        if kind == "auto":
            kind = "flat" if n <= EXACT_MAX_VECTORS else "hnsw"
        nlist = self.ivf_nlist
        if kind == "ivf" and nlist is None:
            nlist = max(1, min(round(4 * math.sqrt(n)), n // IVF_MIN_POINTS_PER_CELL))
        return IndexParams(
            kind, self.hnsw_m, self.ef_construction, self.ef_search, nlist, self.ivf_nprobe
        )


def build_faiss(vectors: np.ndarray, params: IndexParams) -> Any:
    """(n, d) float32 unit vectors -> a filled FAISS inner-product index of kind `params.kind`."""
    import faiss

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    n, dim = vectors.shape
    params = params.resolve(n)
    if params.kind == "flat":
        index: Any = faiss.IndexFlatIP(dim)  # or IndexHNSWFlat / IndexIVFFlat below
    elif params.kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.ef_construction
    else:
        assert params.ivf_nlist is not None
        if params.ivf_nlist > n:
            raise InputError(f"ivf_nlist {params.ivf_nlist} exceeds the {n} vectors")
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, params.ivf_nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
    index.add(vectors)
    set_search_params(index, params)
    return index


def set_search_params(index: Any, params: IndexParams) -> None:
    """Apply the query-time knobs (efSearch, nprobe) to a built or loaded index."""
    import faiss

    if params.kind == "hnsw":
        cast("faiss.IndexHNSWFlat", faiss.downcast_index(index)).hnsw.efSearch = params.ef_search
    elif params.kind == "ivf":
        faiss.extract_index_ivf(index).nprobe = params.ivf_nprobe


def faiss_kind(index: Any) -> str:
    """`flat`, `hnsw` or `ivf` for a FAISS index (else its class name)."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(index, faiss.IndexIVF):
        return "ivf"
    if isinstance(index, faiss.IndexFlat):
        return "flat"
    return type(index).__name__


def duplicate_rows(source: TextSource) -> frozenset[int]:
    """Rows whose text equals an earlier row's after lower-casing and collapsing whitespace
    (`dclr.data.paraphrases.normalize_text`, the key `data.dedup` uses in training)."""
    from dclr.data.paraphrases import normalize_text

    seen: set[str] = set()
    duplicates = set()
    for row, text in enumerate(source.rows()):
        if is_blank(text):
            continue
        key = normalize_text(text)
        if key in seen:
            duplicates.add(row)
        seen.add(key)
    return frozenset(duplicates)


def _write_texts(
    folder: Path,
    source: TextSource,
    rows: np.ndarray,
    skip: frozenset[int] = frozenset(),
    id_column: str | None = None,
) -> None:
    """Write texts.jsonl (id order = row order) and its byte offsets; checks the rows match.
    Rows in `skip` (duplicates left out of the index) are passed over. With `id_column`, each
    record also keeps the row's own document id (`doc_id`), which search results carry."""
    offsets = np.empty(len(rows) + 1, dtype=np.int64)
    position = 0
    next_id = 0
    tmp = folder / f".{TEXTS}.tmp"
    ids = source.ids(id_column) if id_column else itertools.repeat(None)
    with tmp.open("wb") as fh:
        for row, (text, doc_id) in enumerate(zip(source.rows(), ids, strict=False)):
            if is_blank(text) or row in skip:
                continue
            if next_id >= len(rows) or rows[next_id] != row:
                raise InputError(
                    "the input changed since it was encoded",
                    path=source.path,
                    fix="rebuild with --overwrite",
                )
            record = {"id": next_id, "row": row, "text": text}
            if id_column:
                record["doc_id"] = doc_id
            line = json.dumps(record, ensure_ascii=False)
            data = (line + "\n").encode("utf-8")
            offsets[next_id] = position
            fh.write(data)
            position += len(data)
            next_id += 1
    if next_id != len(rows):
        raise InputError("the input changed since it was encoded", path=source.path)
    offsets[-1] = position
    os.replace(tmp, folder / TEXTS)
    with (folder / OFFSETS).open("wb") as fh:
        np.save(fh, offsets, allow_pickle=False)


def build_index(
    model: str,
    source: TextSource,
    out_dir: str | Path,
    params: IndexParams,
    pooler: str | None = None,
    batch_size: int = 128,
    processes: int = 1,
    overwrite: bool = False,
    show_progress: bool = False,
    precision: str = "fp32",
    dedup: bool = False,
    id_column: str | None = None,
) -> dict[str, Any]:
    """Encode `source` (resumably, into out_dir/embeddings), build the index, write the folder.

    `id_column`: a CSV/TSV/JSONL field or Parquet column of the user's own document ids; each
    hit then carries its row's `doc_id` beside the row number.

    `dedup`: rows equal to an earlier row after lower-casing and collapsing whitespace are left
    out of the index (they are still encoded, so the shards serve either choice), so copies do
    not fill the search results; hits keep their input row numbers.

    `precision` is the encoder's (`dclr.models.precision`); queries must use the same one (the
    fingerprint check refuses another).

    The folder is locked for the build, and the index files replace the old ones atomically (see
    the module docstring).
    """
    out_dir = Path(out_dir)
    with FolderLock(out_dir, "dclr index build"):
        return _build_locked(
            model,
            source,
            out_dir,
            params,
            pooler,
            batch_size,
            processes,
            overwrite,
            show_progress,
            precision,
            dedup,
            id_column,
        )


def _build_locked(
    model: str,
    source: TextSource,
    out_dir: Path,
    params: IndexParams,
    pooler: str | None,
    batch_size: int,
    processes: int,
    overwrite: bool,
    show_progress: bool,
    precision: str = "fp32",
    dedup: bool = False,
    id_column: str | None = None,
) -> dict[str, Any]:
    import faiss

    from dclr.indexing.bulk import BulkSettings, bulk_encode
    from dclr.indexing.shards import iter_shards

    remove_stale_staging(out_dir)  # first: a build that fails below still cleans them up
    if id_column:  # a missing column or a text file is refused before anything is encoded
        next(iter(source.ids(id_column)), None)
    settings = BulkSettings(normalize=True, batch_size=batch_size)
    manifest = bulk_encode(
        model,
        source,
        out_dir / EMBEDDINGS,
        settings,
        pooler=pooler,
        processes=processes,
        overwrite=overwrite,
        show_progress=show_progress,
        precision=precision,
    )
    parts = list(iter_shards(out_dir / EMBEDDINGS, manifest["n_shards"], "npy"))
    if not parts or sum(len(r) for r, _ in parts) == 0:
        raise InputError("no non-blank text to index", path=source.path)
    rows = np.concatenate([r for r, _ in parts])  # (n,)
    vectors = np.concatenate([v for _, v in parts]).astype(np.float32)  # (n, d)
    del parts
    skip = duplicate_rows(source) if dedup else frozenset()
    if skip:
        keep = ~np.isin(rows, np.fromiter(skip, dtype=np.int64, count=len(skip)))
        rows, vectors = rows[keep], vectors[keep]
    resolved = params.resolve(len(vectors))
    index = build_faiss(vectors, resolved)
    staging = out_dir / f"{STAGING_PREFIX}{os.getpid()}"
    staging.mkdir()
    try:
        with atomic.storage_guard(staging, needed=vectors.nbytes):
            faiss.write_index(index, str(staging / INDEX_FILE))
            _write_texts(staging, source, rows, skip, id_column)
        files = {name: atomic.file_record(staging / name) for name in INDEX_FILES}
        meta = {
            "format": FORMAT_VERSION,
            "model": manifest["model"],
            "model_fingerprint": manifest["model_fingerprint"],
            "pooler": manifest["pooler"],
            "precision": manifest.get("precision", "fp32"),
            "dim": int(vectors.shape[1]),
            "count": int(len(vectors)),
            "metric": "cosine",
            "params": asdict(resolved),
            "input": manifest["input"],
            "dedup": dedup,
            "duplicates_left_out": len(skip),
            "id_column": id_column,
            "build_id": uuid.uuid4().hex[:BUILD_ID_CHARS],  # which build a server serves
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "files": files,
        }
        for name in INDEX_FILES:
            with (staging / name).open("rb") as fh:
                os.fsync(fh.fileno())
        (out_dir / INDEX_META).unlink(missing_ok=True)  # from here on: "no index" until done
        atomic.fsync_dir(out_dir)
        for name in INDEX_FILES:
            os.replace(staging / name, out_dir / name)
        atomic.write_text(out_dir / INDEX_META, json.dumps(meta, indent=2) + "\n")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return meta


def remove_stale_staging(out_dir: Path) -> list[str]:
    """Delete the staging folders that killed builds left in `out_dir`; returns their names.

    Call only while holding the folder's lock: every build stages under that lock, so no live
    build holds any of them (a build killed with -9 drops the lock with its process)."""
    removed = []
    for path in sorted(out_dir.glob(f"{STAGING_PREFIX}*")):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def query_model(meta: dict[str, Any], given: str | None, folder: str | Path) -> str:
    """The query encoder of an index: `given` (the command line's --model), else the model the
    index records, which must be data, never code: a folder path or a hub id. An index folder is
    a shared artefact, so a recorded `python-package:NAME` (which would import NAME, possibly a
    module shipped inside the folder) is refused unless the command line names it."""
    if given:
        return given
    recorded = str(meta.get("model", ""))
    if recorded.startswith("python-package:"):
        raise InputError(
            f"the index records its model as {recorded!r}; an index folder never chooses code to "
            "import",
            path=folder,
            fix=f"pass --model {recorded} (Python: model={recorded!r}) yourself if you trust "
            "that package",
        )
    if Path(recorded).is_absolute() and not Path(recorded).exists():  # a folder that moved
        raise InputError(
            f"the index records its model as the folder {recorded}, which is not there (moved "
            "or deleted)",
            path=folder,
            fix="pass --model (Python: model=...) with the model's folder now (its fingerprint "
            "is checked against the index's)",
        )
    return recorded


def read_meta(folder: str | Path) -> dict[str, Any]:
    """index.json of an index folder, with a clear error when it is not one."""
    path = Path(folder) / INDEX_META
    if not path.is_file():
        partial = (Path(folder) / INDEX_FILE).exists()
        raise InputError(
            "an unfinished index build (index files but no index.json)"
            if partial
            else "not an index folder (no index.json)",
            path=folder,
            fix="build it (again) with `dclr index build MODEL INPUT --out DIR`",
        )
    rebuild = "build it again with `dclr index build MODEL INPUT --out DIR` (shards are reused)"
    meta = read_json(path, rebuild)
    if meta.get("format") != FORMAT_VERSION:
        raise InputError(f"unknown index format {meta.get('format')!r}", path=path, fix=rebuild)
    params, files = meta.get("params"), meta.get("files", {})
    if not isinstance(params, dict) or not isinstance(files, dict):
        raise InputError(
            "index.json needs a `params` object (and `files`, when present, an object)",
            path=path,
            fix=rebuild,
        )
    for key, kind in (("dim", int), ("count", int), ("model_fingerprint", str), ("pooler", str)):
        if not isinstance(meta.get(key), kind) or isinstance(meta.get(key), bool):
            raise InputError(
                f"index.json needs `{key}` ({kind.__name__}), found {meta.get(key)!r}",
                path=path,
                fix=rebuild,
            )
    try:
        IndexParams(**params)
    except TypeError as err:  # a key IndexParams does not have
        raise InputError(f"index.json params: {err}", path=path, fix=rebuild) from None
    return meta


def build_id(meta: dict[str, Any]) -> str:
    """The id of the build `meta` (index.json) describes: the one it records, or for a folder
    built before ids were recorded, a digest of index.json itself."""
    if meta.get("build_id"):
        return str(meta["build_id"])
    text = json.dumps(meta, sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:BUILD_ID_CHARS]


@dataclass(frozen=True)
class Hit:
    """One search result: vector id, input row number, cosine score, text."""

    id: int
    row: int
    score: float
    text: str
    doc_id: str | None = None  # the row's own id (`index build --id-column`), else None


class SearchIndex:
    """A loaded index folder: `search(vectors, k)` and the texts behind the ids."""

    def __init__(self, folder: str | Path) -> None:
        import faiss

        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        self.params = IndexParams(**self.meta["params"])
        fix = "rebuild the index: `dclr index build MODEL INPUT --out DIR` (shards are reused)"
        for name, record in self.meta.get("files", {}).items():  # absent in older index folders
            problem = atomic.check_file(self.folder / name, record, hash_=True)
            if problem:
                raise InputError(f"{name}: {problem}", path=self.folder, fix=fix)
        try:
            self.index = faiss.read_index(str(self.folder / INDEX_FILE))
        except RuntimeError as err:
            message = str(err).strip().splitlines()[-1] if str(err).strip() else repr(err)
            raise InputError(
                f"{INDEX_FILE} cannot be read: {message}", path=self.folder, fix=fix
            ) from None
        kind = faiss_kind(self.index)
        if kind != self.params.kind or self.index.d != self.meta["dim"]:
            raise InputError(
                f"{INDEX_FILE} holds a {kind} index of dimension {self.index.d}, but index.json "
                f"describes a {self.params.kind} index of dimension {self.meta['dim']}: the "
                "files come from different builds",
                path=self.folder,
                fix=fix,
            )
        set_search_params(self.index, self.params)
        self._offsets = np.load(self.folder / OFFSETS, allow_pickle=False)
        if self.index.ntotal != self.meta["count"] or len(self._offsets) != self.meta["count"] + 1:
            raise InputError("index files disagree on the vector count", path=self.folder, fix=fix)
        with (self.folder / TEXTS).open("rb") as fh:
            self._texts = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    @property
    def fingerprint(self) -> str:
        return str(self.meta["model_fingerprint"])

    @property
    def build(self) -> str:
        """The id of the build loaded (`build_id`)."""
        return build_id(self.meta)

    def folder_build(self) -> str | None:
        """The id of the build the folder holds now: another than `build` after a rebuild
        (the loaded files stay open and keep being served), None while one is being written."""
        try:
            return build_id(read_meta(self.folder))
        except (InputError, OSError):
            return None

    def check_model(self, fingerprint: str, model: str) -> None:
        """Refuse a query model whose fingerprint differs from the one that built the index."""
        from dclr.indexing.fingerprint import SHORT

        if fingerprint != self.fingerprint:
            raise InputError(
                f"this index was built with model {self.meta['model']} (fingerprint "
                f"{self.fingerprint[:SHORT]}), not with {model} (fingerprint "
                f"{fingerprint[:SHORT]}): their vectors are not comparable",
                path=self.folder,
                fix=f"use --model {self.meta['model']}, or rebuild the index with "
                f"`dclr index build {model} ...`"
                + (INT8_HINT if self.meta.get("precision") == "int8" else ""),
            )

    def record(self, vector_id: int) -> dict[str, Any]:
        start, end = self._offsets[vector_id], self._offsets[vector_id + 1]
        return json.loads(self._texts[start:end])

    def search(self, queries: np.ndarray, k: int) -> list[list[Hit]]:
        """(q, d) unit query vectors -> for each query, up to k hits, best first."""
        queries = np.ascontiguousarray(queries, dtype=np.float32)
        if queries.ndim != 2 or queries.shape[1] != self.meta["dim"]:
            raise InputError(f"queries must be (q, {self.meta['dim']}), got {queries.shape}")
        scores, ids = self.index.search(queries, min(k, self.meta["count"]))  # (q, k) each
        results = []
        for row_scores, row_ids in zip(scores, ids, strict=True):
            hits = []
            for score, vector_id in zip(row_scores, row_ids, strict=True):
                if vector_id < 0:  # fewer than k found (IVF cells too small)
                    continue
                record = self.record(int(vector_id))
                hits.append(
                    Hit(
                        int(vector_id),
                        int(record["row"]),
                        float(score),
                        record["text"],
                        record.get("doc_id"),
                    )
                )
            results.append(hits)
        return results

    def close(self) -> None:
        self._texts.close()
