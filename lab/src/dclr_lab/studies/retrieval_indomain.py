"""The report of the in-domain retrieval experiment (issue 26): search scores of SimCSE and DCLR
refined on a retrieval task's unlabelled passages, against the starting model and each other."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dclr_lab.names import DENSE_COLORS, DENSE_LABELS, DENSE_SETTING_NAMES, PRACTICAL_DELTA
from dclr_lab.plots import _pyplot, _save
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE, RunSpec, pair_spec
from dclr_lab.stats import Paired, RunData, fmt, fmt_paired, paired, stat, versus_start
from dclr_lab.studies.dense import DENSE_SCALE_OVERRIDES, DENSE_SETTINGS, DENSE_VARIANTS

METRICS = {"retrieval_ndcg@10": "nDCG@10", "retrieval_recall@10": "Recall@10"}


def _groups(runs: list[RunData]) -> dict[tuple[str, str], list[RunData]]:
    out: dict[tuple[str, str], list[RunData]] = defaultdict(list)
    for run in runs:
        out[(str(run.labels.get("setting")), str(run.labels.get("variant")))].append(run)
    return out


def verdict(d: Paired | None) -> str:
    """A paired difference in words (retrieval scores x 100), as "X is <verdict> Y"."""
    if d is None:
        return "not measured against"
    if d.beyond_noise and abs(d.mean) >= PRACTICAL_DELTA:
        return "above" if d.mean > 0 else "below"
    if d.beyond_noise:
        return f"within {PRACTICAL_DELTA} of"
    return "not distinguishable from"


def section(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = _groups(runs)
    settings = [s for s in DENSE_SETTING_NAMES if any(k[0] == s for k in groups)]
    task = next((str(r.labels.get("task")) for r in runs), "?")
    passages = next((r.before.get("retrieval_n_passages") for r in runs if r.before), None)
    queries = next((r.before.get("retrieval_n_queries") for r in runs if r.before), None)
    rep.text(
        f"Task: the built-in `{task}` retrieval task, test split"
        + (f" ({queries:.0f} queries, {passages:.0f} passages)" if passages else "")
        + ". Training text: its passages only (no queries, no judgements), 60 steps of batch 64 "
        "at lr 3e-5, no dev evaluation (the model after 60 steps is scored). Scores: × 100, "
        "mean ± std over seeds. Δ vs start: paired by seed against the starting model "
        "(all-MiniLM-L6-v2 with the setting's pooler), Δ vs SimCSE: against SimCSE of the same "
        "seed, mean [95 % t-interval]."
    )
    header = ["variant", "seeds"]
    for name in METRICS.values():
        header += [name, f"Δ {name} vs start", f"Δ {name} vs SimCSE"]
    lines = []
    for setting in settings:
        rep.heading(f"{DENSE_SETTING_NAMES[setting]}: search on the test queries")
        members = [r for k, rs in groups.items() if k[0] == setting for r in rs]
        start = ["starting model", "—"]
        for key in METRICS:
            value = next((r.before[key] for r in members if key in r.before), None)
            start += ["—" if value is None else f"{value:.2f}", "—", "—"]
        rows = [start]
        base = groups.get((setting, "simcse"), [])
        for variant in [v for v in DENSE_LABELS if (setting, v) in groups]:
            group = groups[(setting, variant)]
            row = [DENSE_LABELS[variant], str(len(group))]
            for key, name in METRICS.items():
                d_start = versus_start(group, key)
                d_simcse = paired(base, group, key) if variant != "simcse" else None
                row += [fmt(stat(group, key)), fmt_paired(d_start), fmt_paired(d_simcse)]
                if name == "nDCG@10":
                    lines.append(f"{DENSE_LABELS[variant]} ({setting}): nDCG@10 "
                                 f"{verdict(d_start)} the starting model"
                                 + ("" if d_start is None else f" (Δ {d_start.fmt()})")
                                 + ("" if d_simcse is None else f", {verdict(d_simcse)} "
                                    f"SimCSE (Δ {d_simcse.fmt()})") + ".")  # fmt: skip
            rows.append(row)
        rep.table(header, rows)
    if lines:
        rep.text(" ".join(lines))
    rep.text(_answer(groups))
    rep.image(_plot(groups, settings, out / "retrieval-indomain.png"), "in-domain search")
    rep.text(
        "One panel per metric: the change against the starting model per setting and method "
        "(the starting model with that setting's pooler), each seed a dot, the bar the mean and "
        "the whisker its 95 % interval."
    )


def _plot(groups: dict[tuple[str, str], list[RunData]], settings: list[str], path: Path) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(METRICS), figsize=(6.0 * len(METRICS), 4.2), squeeze=False)
    for ax, (key, name) in zip(axes[0], METRICS.items(), strict=True):
        ticks: list[str] = []
        x = 0
        for setting in settings:
            for variant in [v for v in DENSE_LABELS if (setting, v) in groups]:
                group = groups[(setting, variant)]
                deltas = [r.scores[key] - r.before[key] for r in group
                          if key in r.scores and key in r.before]  # fmt: skip
                d = versus_start(group, key)
                if d is None:
                    continue
                color: Any = DENSE_COLORS[variant]
                ax.bar(x, d.mean, color=color, alpha=0.6, width=0.7)
                if d.n > 1:
                    ax.errorbar(x, d.mean, yerr=[[d.mean - d.low], [d.high - d.mean]],
                                color="black", capsize=3, linewidth=1)  # fmt: skip
                ax.scatter([x] * len(deltas), deltas, color="black", s=8, zorder=3)
                ticks.append(f"{DENSE_LABELS[variant]}\n({'mean' if setting == 'mean' else 'CLS'})")
                x += 1
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(ticks)), ticks, fontsize=7, rotation=20)
        ax.set_ylabel(f"Δ {name} × 100 vs starting model")
        ax.set_title(name, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return _save(fig, path)


def _answer(groups: dict[tuple[str, str], list[RunData]]) -> str:
    """Does unsupervised refinement help search here? The best trained cell against the stock
    model as users load it (mean pooling), in words."""
    key = "retrieval_ndcg@10"
    stock = next((r.before[key] for (s, _), rs in groups.items() if s == "mean" for r in rs
                  if key in r.before), None)  # fmt: skip
    cells = {k: stat(rs, key) for k, rs in groups.items()}
    measured = {k: v for k, v in cells.items() if v is not None}
    if stock is None or not measured:
        return "The stock model's mean-pooled score is not in these runs: no overall answer."
    (setting, variant), best = max(measured.items(), key=lambda kv: kv[1].mean)
    side = "above" if best.mean > stock else "below"
    return (f"Overall: the best refined model, {DENSE_LABELS[variant]} in the {setting} "
            f"setting, scores nDCG@10 {best.mean:.2f}, {side} the stock model as "
            f"sentence-transformers users load it (mean pooling, {stock:.2f}).")  # fmt: skip


# In-domain refinement for search (issue 26 item 4): SimCSE and DCLR trained on the passages of
# the built-in paraphrase retrieval task (its test split's corpus side: no queries, no
# judgements), in both settings, at the dense experiment's budget; scored by that task's nDCG@10
# and Recall@10 against the starting model. The STS table is not evaluated (the question is
# search), which halves a CPU run.
RETRIEVAL_TASK = "paraphrase"
RETRIEVAL_VARIANTS: dict[str, tuple[str, ...]] = {
    "mean": ("simcse", "dclr", "dclr_calibrated"),  # calibrated: the quickstart's setting
    "cls_head": ("simcse", "dclr"),
}


def specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:
        for setting, variants in RETRIEVAL_VARIANTS.items():
            for variant in variants:
                method, overrides = DENSE_VARIANTS[variant]
                extra = {**DENSE_SCALE_OVERRIDES[scale], **DENSE_SETTINGS[setting], **overrides,
                         "corpus": f"retrieval-{RETRIEVAL_TASK}", "test_eval": False,
                         "test_retrieval": RETRIEVAL_TASK}  # fmt: skip
                spec = pair_spec(scale, backbone, seed, method, extra)
                labels = {**spec.labels, "setting": setting, "variant": variant,
                          "task": RETRIEVAL_TASK}  # fmt: skip
                specs.append(dataclasses.replace(spec, labels=labels))
    return specs
