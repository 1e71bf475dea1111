"""Evaluate an encoder (or a built `dclr index`) on a BEIR folder.

Exact search: queries and passages are encoded and L2-normalised (cosine similarity), the corpus is
encoded `corpus_chunk` passages at a time and merged into a running top 100 per query
(`dclr.evaluation.search`), so memory stays bounded on any corpus. Index search: the queries are
searched in the index folder as `dclr search` would, so int8 and approximate indexes are measured
as served. Either way the ranked lists go through `dclr.evaluation.retrieval`'s trec_eval metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dclr.data.beir import CORPUS, RetrievalData, load_beir
from dclr.errors import InputError
from dclr.evaluation.retrieval import DEPTH, Run, retrieval_scores
from dclr.evaluation.search import CORPUS_CHUNK, QUERY_BATCH, RunningTopK

EncodeFn = Callable[[list[str]], np.ndarray]
# Queries searched in an index at a time: FAISS's result arrays stay small (2k x 100).
INDEX_QUERY_BATCH = 2048


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (a zero row stays zero, as torch's F.normalize leaves it)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)  # 1e-12: F.normalize's eps


@dataclass
class RetrievalEvaluator:
    """nDCG@10, MRR@10, MAP@100, Recall@{1,10,100} of an encoder on one split of a BEIR folder.

    `encode` maps texts to an (n, d) array (normalised here). `corpus_chunk` passages are encoded
    and searched at a time, `query_batch` queries scored against them at once. Returns fractions
    in [0, 1] as pytrec_eval gives them, plus n_queries, n_passages and seconds.
    """

    folder: str | Path
    split: str = "test"
    corpus_chunk: int = CORPUS_CHUNK
    query_batch: int = QUERY_BATCH
    data: RetrievalData = field(init=False)

    def __post_init__(self) -> None:
        self.data = load_beir(self.folder, self.split)

    def run(self, encode: EncodeFn) -> Run:
        """{query id: {corpus id: cosine}}: the top 100 passages of every judged query."""
        data = self.data
        queries = unit_rows(encode(list(data.queries)))  # (Q, d)
        top = RunningTopK(queries, DEPTH, self.query_batch)
        for start in range(0, len(data.passages), self.corpus_chunk):
            top.add(unit_rows(encode(data.passages[start : start + self.corpus_chunk])))
        scores, rows = top.result()  # (Q, k) each
        return {
            q: {data.corpus_ids[r]: float(s) for s, r in zip(scores[i], rows[i], strict=True)}
            for i, q in enumerate(data.query_ids)
        }

    def __call__(self, encode: EncodeFn) -> dict[str, float]:
        start = time.perf_counter()
        scores = retrieval_scores(self.run(encode), self.data.qrels)
        scores["n_passages"] = float(len(self.data.passages))
        scores["seconds"] = time.perf_counter() - start
        return scores


def indexed_texts(folder: Path, meta: dict) -> list[str]:
    """The text of every row of the file the index was built from, read as `dclr index build`
    read it; that file must be this folder's corpus.jsonl (an index's hits name input rows, BEIR's
    qrels name `_id`s, and corpus.jsonl's row i is its i-th `_id`)."""
    from dclr.data.readers import open_source

    recorded = meta.get("input", {})
    column = recorded.get("column")
    path = folder / CORPUS
    if recorded.get("format") != "jsonl" or not column:
        raise InputError(
            f"the index was built from {recorded.get('path')!r} ({recorded.get('format')}), not "
            f"from a BEIR {CORPUS}",
            path=folder,
            fix=f"build it from this folder's corpus: `dclr index build MODEL {path} --column "
            "text --out DIR`",
        )
    return list(open_source(path, column, "jsonl").rows())


def index_run(
    index_dir: str | Path,
    data_folder: str | Path,
    data: RetrievalData,
    encode: EncodeFn,
    fingerprint: str | None = None,
) -> Run:
    """The run of `data`'s queries searched in a built index (`dclr index build` of the folder's
    corpus.jsonl); refuses an index whose rows or texts do not match that corpus and, given the
    query encoder's `fingerprint` (`dclr.indexing.fingerprint`), an index another model built."""
    from dclr.data.readers import is_blank
    from dclr.indexing.index import SearchIndex

    searcher = SearchIndex(index_dir)
    try:
        if fingerprint is not None:
            searcher.check_model(fingerprint, "the query encoder")
        ids, texts = data.corpus_ids, indexed_texts(Path(data_folder), searcher.meta)
        expected = sum(1 for t in texts if not is_blank(t))
        if expected != searcher.meta["count"]:
            raise InputError(
                f"the index holds {searcher.meta['count']} vectors but "
                f"{Path(data_folder) / CORPUS} has {expected} non-blank "
                f"{searcher.meta['input']['column']!r} rows: it was built from another corpus",
                path=index_dir,
                fix="rebuild the index from this folder's corpus.jsonl",
            )
        run: dict[str, dict[str, float]] = {}
        for start in range(0, len(data.queries), INDEX_QUERY_BATCH):
            batch = data.queries[start : start + INDEX_QUERY_BATCH]
            hits = searcher.search(unit_rows(encode(batch)), DEPTH)
            for qid, found in zip(data.query_ids[start:], hits, strict=False):
                docs = run.setdefault(qid, {})
                for hit in found:
                    if hit.row >= len(ids) or hit.text != texts[hit.row]:
                        raise InputError(
                            f"index row {hit.row} does not hold the text of {CORPUS} line "
                            f"{hit.row + 1}: it was built from another corpus",
                            path=index_dir,
                            fix="rebuild the index from this folder's corpus.jsonl",
                        )
                    docs[ids[hit.row]] = hit.score
    finally:
        searcher.close()
    return run


def evaluate_index(
    index_dir: str | Path,
    folder: str | Path,
    encode: EncodeFn,
    split: str = "test",
    fingerprint: str | None = None,
) -> dict[str, float]:
    """`RetrievalEvaluator`'s table for the queries of `folder` searched in `index_dir` (see
    `index_run` for `fingerprint`)."""
    start = time.perf_counter()
    data = load_beir(folder, split)
    run = index_run(index_dir, folder, data, encode, fingerprint)
    scores = retrieval_scores(run, data.qrels)
    scores["n_passages"] = float(len(data.passages))
    scores["seconds"] = time.perf_counter() - start
    return scores


def evaluate(
    folder: str | Path,
    encode: EncodeFn,
    split: str = "test",
    index: str | Path | None = None,
    fingerprint: str | None = None,
) -> dict[str, float]:
    """The retrieval table of `folder`'s `split`: exact search, or `index` searched as served."""
    if index is not None:
        return evaluate_index(index, folder, encode, split, fingerprint)
    return RetrievalEvaluator(folder, split)(encode)


def evaluate_target(
    encode: EncodeFn,
    folder: str | Path | None = None,
    task: str | None = None,
    split: str = "test",
    data_dir: str | Path | None = None,
    index: str | Path | None = None,
    fingerprint: str | None = None,
) -> dict[str, float]:
    """`evaluate` on a BEIR folder, or on a built-in `task` (built from `data_dir`'s `split` into
    a temporary folder first)."""
    import tempfile

    from dclr.data.paths import resolve_data_dir
    from dclr.data.retrieval_tasks import write_task
    from dclr.errors import ConfigError

    if (folder is None) == (task is None):
        raise ConfigError("give exactly one of folder (a BEIR folder) and task (a built-in task)")
    with tempfile.TemporaryDirectory(prefix="dclr-retrieval-") as tmp:
        if task is not None:
            folder, _ = write_task(task, resolve_data_dir(data_dir), Path(tmp) / task, split)
        assert folder is not None
        return evaluate(folder, encode, split, index, fingerprint)
