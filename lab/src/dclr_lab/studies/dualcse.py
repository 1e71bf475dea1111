"""DualCSE-cross vs supervised SimCSE on INLI (issue 16, `dualcse-inli`): RTE accuracy per
hypothesis type, paired by seed, next to the DualCSE paper's: its runs and its report section."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dclr_lab import paper
from dclr_lab.plots import _paired_bars
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE, RunSpec
from dclr_lab.stats import RunData, fmt, fmt_paired, group, paired, stat
from dclr_lab.studies.shared import row_order

# At least one full epoch of INLI train (8,000 premises) each, at the CPU recipes' batch of 16:
# DualCSE-cross 8,000 / 16 = 500 steps per epoch; SimCSE-sup (two triples per premise, 16,000)
# 16,000 / 16 = 1,000 steps per epoch. `epochs: 1` replaces the recipes' max_steps.
DUALCSE_RECIPES = {
    "cpu": {"dualcse-cross": "dualcse/dualcse_cross_minilm_cpu.yaml",
            "simcse-sup": "dualcse/simcse_sup_inli_minilm_cpu.yaml"},
    "paper": {"dualcse-cross": "dualcse/dualcse_cross_bert_base.yaml",
              "simcse-sup": "dualcse/simcse_sup_inli_bert_base.yaml"},
}  # fmt: skip
DUALCSE_EPOCHS = 1.0
# The report's names of the two methods (the runs' `method` label).
METHOD_NAMES = {"simcse-sup": "SimCSE-sup (INLI)", "dualcse-cross": "DualCSE-cross"}


def specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    overrides: dict[str, Any] = (
        {"epochs": DUALCSE_EPOCHS, "max_steps": None} if scale == "cpu" else {}
    )
    return [
        RunSpec(recipe, seed, {"method": method, "backbone": ANALYSIS_BACKBONE[scale]}, overrides)
        for seed in seeds  # seed-major: each finished seed is a complete paired comparison
        for method, recipe in DUALCSE_RECIPES[scale].items()
    ]


def section(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "method")
    rep.heading("RTE on INLI test per hypothesis type (accuracy × 100)")
    rep.text(
        "Threshold tuned on INLI val (our decision rule, docs/dualcse.md). Mean ± std over seeds; "
        "Δ = DualCSE-cross − SimCSE-sup paired by seed, 95 % t-interval. Paper rows: "
        f"{paper.DUALCSE_TEXT} l.117-118 (its backbone and budget, not ours)."
    )
    kinds = list(paper.HYPOTHESIS_COLUMNS)
    rows = []
    for method in row_order([m for (m,) in groups], tuple(METHOD_NAMES)):
        members = groups[(method,)]
        rows.append([METHOD_NAMES.get(method, str(method)), str(len(members)),
                     *(fmt(stat(members, f"rte_{k}")) for k in kinds)])  # fmt: skip
    base, other = groups.get(("simcse-sup",), []), groups.get(("dualcse-cross",), [])
    deltas = [paired(base, other, f"rte_{k}") for k in kinds]
    rows.append(["Δ (paired)", "", *(fmt_paired(d) for d in deltas)])
    for method, numbers in paper.DUALCSE_RTE.items():
        rows.append(
            [f"paper: {METHOD_NAMES[method]}", "", *(f"{numbers[k].value:.2f}" for k in kinds)]
        )
    paper_delta = [paper.DUALCSE_RTE["dualcse-cross"][k].value
                   - paper.DUALCSE_RTE["simcse-sup"][k].value for k in kinds]  # fmt: skip
    rows.append(["paper: Δ", "", *(f"{d:+.2f}" for d in paper_delta)])
    rep.table(["method", "seeds", *kinds], rows)
    if base and other:
        path = _paired_bars(out / "dualcse_rte_delta.png",
                            "DualCSE-cross − SimCSE-sup per hypothesis type",
                            "Δ RTE accuracy × 100 (paired by seed), 95 % t-interval", kinds,
                            deltas)  # fmt: skip
        rep.image(path, "DualCSE minus SimCSE-sup RTE")
        agree = [k for k, d, pd in zip(kinds, deltas, paper_delta, strict=True)
                 if d and d.n > 1 and ((d.low > 0 and pd > 0) or (d.high < 0 and pd < 0))]  # fmt: skip
        rep.text(
            "Types where our interval excludes 0 with the paper's sign: "
            + (", ".join(agree) if agree else "none")
            + ". Elsewhere the difference is inside the seed noise at this budget or has the "
            "opposite sign (table)."
        )
