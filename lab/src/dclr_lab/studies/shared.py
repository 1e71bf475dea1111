"""Report pieces several studies write: the paper's finding as a line, rows in a chosen order, and
a score table per value of one label with the starting model as a reference row."""

from __future__ import annotations

from typing import Any

import numpy as np

from dclr_lab import paper
from dclr_lab.render import Report
from dclr_lab.stats import RunData, fmt, fmt_paired, group, paired, stat


def paper_finding(rep: Report, key: str, extra: str = "") -> None:
    """The paper's finding `key` (paper.FINDINGS) with its source, as one line of the report."""
    finding, source = paper.FINDINGS[key]
    rep.text(f"Paper: {finding} ({source}).{extra}")


def row_order(values: list[Any], order: tuple[Any, ...] = ()) -> list[Any]:
    """`order` first (those present), then the rest: numbers ascending, anything else by text."""
    rest = [v for v in values if v not in order]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rest):
        rest.sort()
    else:
        rest.sort(key=str)
    return [v for v in order if v in values] + rest


def shared_start(runs: list[RunData]) -> dict[str, float] | None:
    """The starting model's scores when every run records the same ones, else None."""
    starts = [r.before for r in runs]
    if not starts or not all(starts):
        return None
    first = starts[0]
    same = all(abs(s.get("avg", np.nan) - first.get("avg", np.nan)) < 1e-9 for s in starts)
    return first if same else None


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def score_table(
    rep: Report, runs: list[RunData], key: str, base: Any, order: tuple[Any, ...] = ()
) -> tuple[list[Any], dict[tuple[Any, ...], list[RunData]]]:
    """One row per value of label `key` (in `order`, else numbers ascending): STS-B dev, STS-B,
    SICK-R, avg (mean ± std), and the paired avg difference to the row `base` with its 95 %
    interval. Returns the row values in table order and the runs grouped by them."""
    groups = group(runs, key)
    values = row_order([v for (v,) in groups], order)
    rows = []
    for value in values:
        members = groups[(value,)]
        delta = paired(groups.get((base,), []), members, "avg") if value != base else None
        rows.append([str(value), str(len(members)), fmt(stat(members, "dev")),
                     fmt(stat(members, "STSBenchmark")), fmt(stat(members, "SICKRelatedness")),
                     fmt(stat(members, "avg")), fmt_paired(delta)])  # fmt: skip
    start = shared_start(runs)
    if start is not None:  # every run starts from the same model: its scores as a reference row
        rows.append(["starting model (untrained)", "—", "—", _num(start.get("STSBenchmark")),
                     _num(start.get("SICKRelatedness")), _num(start.get("avg")), ""])  # fmt: skip
    rep.table([key, "seeds", "STS-B dev", "STS-B", "SICK-R", "avg",
               f"Δ avg vs {base} (paired) [95 % CI]"], rows)  # fmt: skip
    return values, groups
