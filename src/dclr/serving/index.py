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
"""

from __future__ import annotations

import json
import math
import mmap
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from dclr.errors import InputError
from dclr.serving.readers import TextSource, is_blank

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
# k-means needs a few dozen points per cell to place centroids well (FAISS warns below 39).
IVF_MIN_POINTS_PER_CELL = 39


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
        index = faiss.IndexFlatIP(dim)
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
        faiss.downcast_index(index).hnsw.efSearch = params.ef_search
    elif params.kind == "ivf":
        faiss.extract_index_ivf(index).nprobe = params.ivf_nprobe


def _write_texts(folder: Path, source: TextSource, rows: np.ndarray) -> None:
    """Write texts.jsonl (id order = row order) and its byte offsets; checks the rows match."""
    offsets = np.empty(len(rows) + 1, dtype=np.int64)
    position = 0
    next_id = 0
    tmp = folder / f".{TEXTS}.tmp"
    with tmp.open("wb") as fh:
        for row, text in enumerate(source.rows()):
            if is_blank(text):
                continue
            if next_id >= len(rows) or rows[next_id] != row:
                raise InputError(
                    "the input changed since it was encoded",
                    path=source.path,
                    fix="rebuild with --overwrite",
                )
            line = json.dumps({"id": next_id, "row": row, "text": text}, ensure_ascii=False)
            data = (line + "\n").encode("utf-8")
            offsets[next_id] = position
            fh.write(data)
            position += len(data)
            next_id += 1
    if next_id != len(rows):
        raise InputError("the input changed since it was encoded", path=source.path)
    offsets[-1] = position
    os.replace(tmp, folder / TEXTS)
    np.save(folder / OFFSETS, offsets, allow_pickle=False)


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
) -> dict[str, Any]:
    """Encode `source` (resumably, into out_dir/embeddings), build the index, write the folder."""
    import faiss

    from dclr.serving.bulk import BulkSettings, bulk_encode
    from dclr.serving.shards import iter_shards

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
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
    )
    parts = list(iter_shards(out_dir / EMBEDDINGS, manifest["n_shards"], "npy"))
    if not parts or sum(len(r) for r, _ in parts) == 0:
        raise InputError("no non-blank text to index", path=source.path)
    rows = np.concatenate([r for r, _ in parts])  # (n,)
    vectors = np.concatenate([v for _, v in parts]).astype(np.float32)  # (n, d)
    del parts
    resolved = params.resolve(len(vectors))
    index = build_faiss(vectors, resolved)
    faiss.write_index(index, str(out_dir / INDEX_FILE))
    _write_texts(out_dir, source, rows)
    meta = {
        "format": FORMAT_VERSION,
        "model": manifest["model"],
        "model_fingerprint": manifest["model_fingerprint"],
        "pooler": manifest["pooler"],
        "dim": int(vectors.shape[1]),
        "count": int(len(vectors)),
        "metric": "cosine",
        "params": asdict(resolved),
        "input": manifest["input"],
    }
    (out_dir / INDEX_META).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def read_meta(folder: str | Path) -> dict[str, Any]:
    """index.json of an index folder, with a clear error when it is not one."""
    path = Path(folder) / INDEX_META
    if not path.is_file():
        raise InputError(
            "not an index folder (no index.json)",
            path=folder,
            fix="build one with `dclr index build MODEL INPUT --out DIR`",
        )
    meta = json.loads(path.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise InputError(f"unknown index format {meta.get('format')!r}", path=path)
    return meta


@dataclass(frozen=True)
class Hit:
    """One search result: vector id, input row number, cosine score, text."""

    id: int
    row: int
    score: float
    text: str


class SearchIndex:
    """A loaded index folder: `search(vectors, k)` and the texts behind the ids."""

    def __init__(self, folder: str | Path) -> None:
        import faiss

        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        self.params = IndexParams(**self.meta["params"])
        self.index = faiss.read_index(str(self.folder / INDEX_FILE))
        set_search_params(self.index, self.params)
        self._offsets = np.load(self.folder / OFFSETS, allow_pickle=False)
        if self.index.ntotal != self.meta["count"] or len(self._offsets) != self.meta["count"] + 1:
            raise InputError("index files disagree on the vector count", path=self.folder)
        with (self.folder / TEXTS).open("rb") as fh:
            self._texts = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    @property
    def fingerprint(self) -> str:
        return str(self.meta["model_fingerprint"])

    def check_model(self, fingerprint: str, model: str) -> None:
        """Refuse a query model whose fingerprint differs from the one that built the index."""
        from dclr.serving.fingerprint import SHORT

        if fingerprint != self.fingerprint:
            raise InputError(
                f"this index was built with model {self.meta['model']} (fingerprint "
                f"{self.fingerprint[:SHORT]}), not with {model} (fingerprint "
                f"{fingerprint[:SHORT]}): their vectors are not comparable",
                path=self.folder,
                fix=f"use --model {self.meta['model']}, or rebuild the index with "
                f"`dclr index build {model} ...`",
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
                hits.append(Hit(int(vector_id), int(record["row"]), float(score), record["text"]))
            results.append(hits)
        return results

    def close(self) -> None:
        self._texts.close()
