"""The report of a hyper-parameter search (`dclr experiment search`, experiment `search:NAME`;
its trials are `dclr_lab.search`): one row per trial, best first."""

from __future__ import annotations

import math
from pathlib import Path

from dclr_lab.render import Report
from dclr_lab.stats import RunData, fmt_num


def section(rep: Report, runs: list[RunData], out: Path) -> None:
    """One row per trial: its sampled parameters and scores, best first."""
    params = sorted({k for r in runs for k in r.labels.get("params", {})})
    rep.heading("Trials, best 7-task avg first")
    ranked = sorted(runs, key=lambda r: -r.scores.get("avg", -math.inf))
    rows = [[str(r.labels.get("trial", "?")), *(str(r.labels["params"].get(p)) for p in params),
             *(fmt_num(r.scores.get(t)) for t in ("STSBenchmark", "SICKRelatedness", "avg"))]
            for r in ranked]  # fmt: skip
    rep.table(["trial", *params, "STS-B", "SICK-R", "avg"], rows)
