"""The DCLR paper's augmentation study (`augmentations`): each positive-view strategy as the second
view, with SimCSE and with DCLR: its runs and its report section."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, get_args

from dclr.lab_api import RATED, flat_hints
from dclr_lab.names import method_label
from dclr_lab.plots import _bars
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE, ExperimentUnavailable, RunSpec, pair_spec
from dclr_lab.stats import RunData, fmt, fmt_paired, group, paired, stat

# The TrainConfig field of the second view's strategy (dclr.views); the first stays dropout.
VIEW_FIELD = "view2"
# Cut fraction for the cutoff and embedding-dropout views: within ConSERT's 0.1-0.2 range (our
# choice, not the paper's).
CUTOFF_RATE = 0.15
# Views left out: 'adversarial' needs supervised NLI labels, which these unsupervised runs lack.
UNSUPERVISED_EXCLUDED = ("adversarial",)


def view_strategies() -> tuple[str, ...]:
    """The positive-view strategies TrainConfig offers; raises until the option exists."""
    hints = flat_hints()
    if VIEW_FIELD not in hints:
        raise ExperimentUnavailable(
            f"experiment 'augmentations' is not available yet: it needs the TrainConfig option "
            f"{VIEW_FIELD!r} (positive-view strategies), which this version of dclr lacks"
        )
    options = get_args(hints[VIEW_FIELD])
    if not options:
        raise ExperimentUnavailable(f"TrainConfig.{VIEW_FIELD} is not a Literal of strategies")
    return tuple(str(o) for o in options if o not in UNSUPERVISED_EXCLUDED)


def _view_overrides(view: str) -> dict[str, Any]:
    rated = view in RATED  # cutoffs and embedding dropout cut a fraction
    return {VIEW_FIELD: view, f"{VIEW_FIELD}_rate": CUTOFF_RATE if rated else 0.0}


def specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    return [
        dataclasses.replace(
            spec,
            labels={**spec.labels, "view": view},
            overrides={**spec.overrides, **_view_overrides(view)},
        )
        for view in view_strategies()
        for method in ("simcse", "dclr")
        for seed in seeds
        for spec in [pair_spec(scale, backbone, seed, method)]
    ]


def section(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "view", "method")
    views = sorted({v for v, _ in groups}, key=lambda v: (v != "dropout", v))
    methods = sorted({m for _, m in groups}, key=lambda m: (m != "simcse", m))
    rep.heading("Positive-view strategies with and without DCLR")
    rep.text(
        "STS-B dev: the best development score of the run (the model-selection metric, Spearman "
        "× 100); avg: the 7-task STS test average of that model. Mean ± std over seeds."
    )
    rows = []
    for v in views:
        row = [v]
        for m in methods:
            members = groups.get((v, m), [])
            row += [fmt(stat(members, "dev")), fmt(stat(members, "avg"))]
        delta = paired(groups.get((v, "simcse"), []), groups.get((v, "dclr"), []), "dev")
        rows.append([*row, fmt_paired(delta)])
    header = ["view"] + [f"{method_label(m)} {c}" for m in methods
                         for c in ("STS-B dev", "avg")]  # fmt: skip
    rep.table([*header, "Δ dev (DCLR − SimCSE, paired) [95 % CI]"], rows)
    series = {method_label(m): [stat(groups.get((v, m), []), "dev") for v in views]
              for m in methods}  # fmt: skip
    path = _bars(out / "augmentations.png", "STS-B dev per positive view (view 1 = dropout)",
                 views, series, "STS-B dev Spearman × 100", zoom=True)  # fmt: skip
    rep.image(path, "augmentation bars")
    rep.text(
        "The paper's augmentation figure (BERT-base) reports DCLR above SimCSE for every "
        "strategy, dropout best; its per-bar values are not kept here, so none is drawn."
    )
