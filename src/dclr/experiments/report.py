"""`dclr report EXPERIMENT`: Markdown (and optional self-contained HTML) with tables and PNG plots.

Reads the runs an experiment registered in the SQLite index (scores from results.json, curves from
metrics.jsonl), aggregates seeds as mean ± sample std, and puts the paper's reported numbers
(`dclr.experiments.paper`) next to ours. A report is a list of blocks rendered twice: Markdown with
PNG files beside it, and HTML with the PNGs inlined.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import numpy as np

from dclr.data.sts import STS_TASKS
from dclr.errors import ConfigError
from dclr.experiments import paper
from dclr.experiments.names import (
    method_label,
)
from dclr.experiments.plots import COLORS, _bars, _pyplot, _save
from dclr.experiments.registry import Registry
from dclr.experiments.render import Report
from dclr.experiments.runspec import ANALYSIS_BACKBONE
from dclr.experiments.specs import EXPERIMENTS
from dclr.experiments.stats import (
    Paired,
    RunData,
    Stat,
    _as_stat,
    fmt,
    fmt_num,
    fmt_paired,
    group,
    load_runs,
    paired,
    stat,
)
from dclr.experiments.studies import dense, retrieval_indomain
from dclr.training.tracking import read_metrics

TASK_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}


# ---- sections ---------------------------------------------------------------------------------
def _short(task: str) -> str:
    return TASK_NAMES.get(task, task)


def _paper_ref(backbone: str) -> tuple[str, str]:
    """The paper backbone to compare with: the same one, else BERT-base (the analyses' model)."""
    return (backbone, "") if (backbone, "dclr") in paper.MAIN_AVG else ("bert-base", " (BERT-base)")


def section_main(rep: Report, runs: list[RunData], out: Path) -> None:
    rep.heading("STS test, Spearman × 100 (mean ± std over seeds)")
    header = ["backbone", "method", "seeds", *(_short(t) for t in STS_TASKS), "avg"]
    rows, groups = [], group(runs, "backbone", "method")
    for (backbone, method), members in sorted(groups.items()):
        cells = [fmt(stat(members, t)) for t in (*STS_TASKS, "avg")]
        rows.append([backbone, method_label(method), str(len(members)), *cells])
    rep.table(header, rows)
    rep.heading("Ours next to the paper (7-task avg)")
    ours: dict[str, list[Stat | None]]
    rows, labels, ours, theirs = [], [], {"simcse": [], "dclr": []}, []
    deltas: list[Paired | None] = []
    for backbone in sorted({b for b, _ in groups}):
        s = stat(groups.get((backbone, "simcse"), []), "avg")
        d = stat(groups.get((backbone, "dclr"), []), "avg")
        ref, note = _paper_ref(backbone)
        ps, pd = paper.MAIN_AVG[(ref, "simcse")].value, paper.MAIN_AVG[(ref, "dclr")].value
        delta = paired(
            groups.get((backbone, "simcse"), []), groups.get((backbone, "dclr"), []), "avg"
        )
        deltas.append(delta)
        rows.append(
            [backbone, fmt(s), fmt(d), fmt_paired(delta), f"{ps:.2f}{note}",
             f"{pd:.2f}{note}", fmt_num(pd - ps, signed=True)]
        )  # fmt: skip
        labels.append(f"{backbone}\n(paper: {ref})" if note else backbone)
        ours["simcse"].append(s)
        ours["dclr"].append(d)
        theirs.append(Stat(pd - ps, 0.0, 1))
    rep.table(
        ["backbone", "SimCSE", "DCLR", "Δ ours [95 % CI]", "paper SimCSE", "paper DCLR", "Δ paper"],
        rows,
    )
    path = _bars(
        out / "main_delta.png",
        "DCLR − SimCSE, 7-task STS avg",
        labels,
        {"ours": [_as_stat(d) for d in deltas], "paper": theirs},
        "Δ Spearman × 100 (DCLR − SimCSE)",
    )
    rep.image(path, "DCLR minus SimCSE, ours and the paper's")
    rep.text(
        "Δ ours: paired by seed (DCLR − SimCSE of the same seed), mean [95 % t-interval]; error "
        "bars: the interval's half-width. Rows without a paper backbone are "
        "compared with the paper's BERT-base numbers; the absolute scores are not comparable "
        "across backbones, the Δ is the quantity to compare."
    )


def section_ablation(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "variant")
    rep.heading("Ablations: 7-task STS avg (mean ± std over seeds)")
    rows, labels, ours, theirs = [], [], [], []
    for variant, label in paper.ABLATION_LABELS.items():
        members = groups.get((variant,), [])
        s = stat(members, "avg")
        delta = paired(groups.get(("full",), []), members, "avg") if variant != "full" else None
        ref = paper.ABLATION[variant].value
        ref_delta = ref - paper.ABLATION["full"].value
        rows.append([label, str(len(members)), fmt(s), fmt_paired(delta),
                     fmt(stat(members, "STSBenchmark")), fmt(stat(members, "SICKRelatedness")),
                     f"{ref:.2f}", fmt_num(ref_delta, signed=True) if variant != "full" else "—"])  # fmt: skip
        if variant != "full":
            labels.append(label)
            ours.append(_as_stat(delta))
            theirs.append(Stat(ref_delta, 0.0, 1))
    rep.table(["variant", "seeds", "avg", "Δ avg vs full [95 % CI]", "STS-B", "SICK-R",
               "paper avg (BERT-base)", "paper Δ"], rows)  # fmt: skip
    path = _bars(
        out / "ablation_delta.png",
        "Ablations: change of the 7-task STS avg vs full DCLR",
        labels,
        {"ours": ours, "paper (BERT-base)": theirs},
        "Δ Spearman × 100 vs full DCLR",
    )
    rep.image(path, "ablation deltas")
    finding, source = paper.FINDINGS["ablation"]
    rep.text(
        "Δ: paired by seed against full DCLR, mean [95 % t-interval]; error bars: the interval's "
        f"half-width. Paper: {finding} ({source})."
    )


def _curves(runs: list[RunData], metric: str) -> dict[str, tuple[list[int], list[Stat | None]]]:
    """method -> (steps, [Stat per step]) from the eval rows of metrics.jsonl, with step 0 the
    starting model's value from before.json (same STS-B dev sentences)."""
    out: dict[str, tuple[list[int], list[Stat | None]]] = {}
    for (method,), members in sorted(group(runs, "method").items()):
        per_step: dict[int, list[float]] = defaultdict(list)
        for run in members:
            before = run.run_dir / "before.json"  # the starting model: step 0
            if before.is_file() and metric in (start := json.loads(before.read_text())):
                per_step[0].append(float(start[metric]))
            for row in read_metrics(run.run_dir, "eval"):
                if metric in row:
                    per_step[int(row["step"])].append(float(row[metric]))
        steps = sorted(per_step)
        out[method] = (steps, [Stat.of(per_step[s]) for s in steps])
    return out


def section_uniformity(rep: Report, runs: list[RunData], out: Path) -> None:
    curves = _curves(runs, "uniformity")
    rep.heading("Uniformity loss ℓ_uniform vs training step (STS-B dev sentences)")
    rows = []
    for method, (steps, stats) in curves.items():
        for step, s in zip(steps, stats, strict=True):
            rows.append([method_label(method), str(step), fmt(s, 3)])
    rep.table(["method", "step", "ℓ_uniform (mean ± std)"], rows)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for method, (steps, stats) in curves.items():
        # Stat.of gives None only for a step without a finite value
        mean = np.array([cast(Stat, s).mean for s in stats])
        std = np.array([cast(Stat, s).std for s in stats])
        ax.plot(steps, mean, marker="o", color=COLORS.get(method), label=method_label(method),
                linestyle="--" if method == "simcse" else "-", alpha=0.85)  # fmt: skip
        ax.fill_between(steps, mean - std, mean + std, color=COLORS.get(method), alpha=0.2)
    ax.set_xlabel("training step (optimizer updates)")
    ax.set_ylabel("ℓ_uniform (log-scale loss; lower = more uniform)")
    ax.set_title("ℓ_uniform = log E exp(−2‖x−y‖²) on STS-B dev, band ± std over seeds",
                 fontsize=10)  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend()
    rep.image(_save(fig, out / "uniformity.png"), "uniformity vs step")
    _paper_finding(rep, "uniformity")


def section_few_shot(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "fraction", "method")
    fractions = sorted({f for f, _ in groups}, reverse=True)
    methods = sorted({m for _, m in groups})
    rep.heading("Few-shot: STS test vs fraction of the training corpus")
    rows = []
    for f in fractions:
        row = [f"{100 * f:g}%"]
        for m in methods:
            members = groups.get((f, m), [])
            row += [fmt(stat(members, "STSBenchmark")), fmt(stat(members, "SICKRelatedness"))]
        simcse, dclr = groups.get((f, "simcse"), []), groups.get((f, "dclr"), [])
        row += [fmt_paired(paired(simcse, dclr, t)) for t in ("STSBenchmark", "SICKRelatedness")]
        rows.append(row)
    header = ["fraction"] + [f"{method_label(m)} {t}" for m in methods
                             for t in ("STS-B", "SICK-R")]  # fmt: skip
    header += ["Δ STS-B (DCLR − SimCSE, paired)", "Δ SICK-R (paired)"]
    rep.table(header, rows)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, task in zip(axes, ("STSBenchmark", "SICKRelatedness"), strict=True):
        for m in methods:
            xs, stats = [], []
            for f in fractions:
                s = stat(groups.get((f, m), []), task)
                if s:
                    xs.append(100 * f)
                    stats.append(s)
            ax.errorbar(xs, [s.mean for s in stats], yerr=[s.std for s in stats], marker="o",
                        capsize=3, color=COLORS.get(m), label=method_label(m))  # fmt: skip
        ax.set_xscale("log")
        ticks = sorted(100 * f for f in fractions)
        ax.set_xticks(ticks, [f"{t:g}%" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("training data used (% of the corpus, log scale)")
        ax.set_ylabel(f"{_short(task)} test Spearman × 100")
        ax.set_title(_short(task))
        ax.grid(alpha=0.3, which="both")
        ax.legend()
    rep.image(_save(fig, out / "few_shot.png"), "few-shot curves")
    if len(fractions) > 1:
        full, least = fractions[0], fractions[-1]
        drops = []
        for m in methods:
            for task in ("STSBenchmark", "SICKRelatedness"):
                a, b = stat(groups.get((full, m), []), task), stat(groups.get((least, m), []), task)
                if a and b:
                    drops.append(f"{method_label(m)} {_short(task)} "
                                 f"{100 * (b.mean - a.mean) / a.mean:+.1f} %")  # fmt: skip
        if drops:
            rep.text(f"Ours, {100 * least:g}% vs {100 * full:g}% of the data (relative change of "
                     f"the mean): {'; '.join(drops)}.")  # fmt: skip
    _paper_finding(rep, "few-shot", " No per-point numbers are kept, so none is drawn.")


def section_sensitivity(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "param", "value")
    params = sorted({p for p, _ in groups})
    rep.heading("Sensitivity: STS test vs φ and the noise ratio k")
    rows = []
    for p in params:
        for value in sorted(v for q, v in groups if q == p):
            members = groups[(p, value)]
            rows.append([p, f"{value:g}", str(len(members)),
                         *(fmt(stat(members, t)) for t in ("STSBenchmark", "SICKRelatedness", "avg"))])  # fmt: skip
    rep.table(["parameter", "value", "seeds", "STS-B", "SICK-R", "avg"], rows)
    plt = _pyplot()
    fig, axes = plt.subplots(1, max(1, len(params)), figsize=(5.5 * max(1, len(params)), 4))
    axes = np.atleast_1d(axes)
    xlabels = {
        "false_negative_threshold": "φ (complementary cosine above which a negative is dropped)",
        "noise_ratio": "noise ratio k (noise negatives per batch sentence)",
    }
    for ax, p in zip(axes, params, strict=False):
        values = sorted(v for q, v in groups if q == p)
        for task, color in (("STSBenchmark", "#2ca02c"), ("SICKRelatedness", "#9467bd")):
            stats = [stat(groups[(p, v)], task) for v in values]
            ax.errorbar(values, [s.mean if s else np.nan for s in stats],
                        yerr=[s.std if s else 0 for s in stats], marker="o", capsize=3,
                        color=color, label=f"{_short(task)} (ours)")  # fmt: skip
        if p in paper.PAPER_DEFAULTS:
            ax.axvline(paper.PAPER_DEFAULTS[p].value, color=COLORS["paper"], linestyle="--",
                       label="paper's choice")  # fmt: skip
        if p == "noise_ratio":
            ax.set_xscale("log", base=2)
            ax.set_xticks(values, [f"{v:g}" for v in values])
            ax.minorticks_off()
        ax.set_xlabel(xlabels.get(p, p))
        ax.set_ylabel("test Spearman × 100")
        ax.grid(alpha=0.3)
        ax.legend()
    rep.image(_save(fig, out / "sensitivity.png"), "sensitivity to phi and k")
    _paper_finding(rep, "sensitivity")


def section_augmentations(rep: Report, runs: list[RunData], out: Path) -> None:
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


def _row_order(values: list[Any], order: tuple[Any, ...] = ()) -> list[Any]:
    """`order` first (those present), then the rest: numbers ascending, anything else by text."""
    rest = [v for v in values if v not in order]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in rest):
        rest.sort()
    else:
        rest.sort(key=str)
    return [v for v in order if v in values] + rest


def _paper_finding(rep: Report, key: str, extra: str = "") -> None:
    """The paper's finding `key` (paper.FINDINGS) with its source, as one line of the report."""
    finding, source = paper.FINDINGS[key]
    rep.text(f"Paper: {finding} ({source}).{extra}")


def _score_table(
    rep: Report, runs: list[RunData], key: str, base: Any, order: tuple[Any, ...] = ()
) -> tuple[list[Any], dict[tuple[Any, ...], list[RunData]]]:
    """One row per value of label `key` (in `order`, else numbers ascending): STS-B dev, STS-B,
    SICK-R, avg (mean ± std), and the paired avg difference to the row `base` with its 95 %
    interval. Returns the row values in table order and the runs grouped by them."""
    groups = group(runs, key)
    values = _row_order([v for (v,) in groups], order)
    rows = []
    for value in values:
        members = groups[(value,)]
        delta = paired(groups.get((base,), []), members, "avg") if value != base else None
        rows.append([str(value), str(len(members)), fmt(stat(members, "dev")),
                     fmt(stat(members, "STSBenchmark")), fmt(stat(members, "SICKRelatedness")),
                     fmt(stat(members, "avg")), fmt_paired(delta)])  # fmt: skip
    start = _shared_start(runs)
    if start is not None:  # every run starts from the same model: its scores as a reference row
        rows.append(["starting model (untrained)", "—", "—", _num(start.get("STSBenchmark")),
                     _num(start.get("SICKRelatedness")), _num(start.get("avg")), ""])  # fmt: skip
    rep.table([key, "seeds", "STS-B dev", "STS-B", "SICK-R", "avg",
               f"Δ avg vs {base} (paired) [95 % CI]"], rows)  # fmt: skip
    return values, groups


def _num(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _shared_start(runs: list[RunData]) -> dict[str, float] | None:
    """The starting model's scores when every run records the same ones, else None."""
    starts = [r.before for r in runs]
    if not starts or not all(starts):
        return None
    first = starts[0]
    same = all(abs(s.get("avg", np.nan) - first.get("avg", np.nan)) < 1e-9 for s in starts)
    return first if same else None


def _paired_bars(path: Path, title: str, xlabel: str, labels: list[str],
                 deltas: list[Paired | None]) -> Path:  # fmt: skip
    """Horizontal bars of paired differences with their 95 % t-intervals, zero marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(labels) + 1.5))
    y = np.arange(len(labels))[::-1]
    means = [d.mean if d else np.nan for d in deltas]
    low = [d.mean - d.low if d and d.n > 1 else 0 for d in deltas]
    high = [d.high - d.mean if d and d.n > 1 else 0 for d in deltas]
    colors = ["#2ca02c" if d and d.n > 1 and d.low > 0 else "#d62728" if d and d.n > 1
              and d.high < 0 else "#7f7f7f" for d in deltas]  # fmt: skip
    ax.barh(y, means, xerr=[low, high], capsize=3, color=colors, edgecolor="black", linewidth=0.5)
    ax.axvline(0, color="black", linewidth=0.7)
    ax.set_yticks(y, labels)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def section_consert_augmentations(rep: Report, runs: list[RunData], out: Path) -> None:
    from dclr.experiments.specs import CONSERT_VIEW_PAIRS

    rep.heading("ConSERT's view strategies (its settings: mean pooling, no backbone dropout)")
    rep.text(
        "Each row: view 1 none (plain), view 2 the strategy; the pair row is ConSERT's best "
        "(consert.txt l.90); the last row is the old backbone-dropout view with dropout on. "
        "Mean ± std over seeds; Δ paired by seed."
    )
    order = tuple(label for label, _, _ in CONSERT_VIEW_PAIRS)
    values, groups = _score_table(rep, runs, "view", "none", order)
    others = [v for v in values if v != "none"]
    deltas = [paired(groups.get(("none",), []), groups[(v,)], "avg") for v in others]
    path = _paired_bars(out / "consert_views.png",
                        "ConSERT views vs no augmentation (green/red: interval excludes 0)",
                        "Δ 7-task STS avg vs view 'none' (paired by seed), 95 % t-interval",
                        [str(v) for v in others], deltas)  # fmt: skip
    rep.image(path, "ConSERT view deltas")
    _paper_finding(rep, "consert-augmentations")


def section_consert_few_shot(rep: Report, runs: list[RunData], out: Path) -> None:
    rep.heading("ConSERT with n unlabelled texts")
    rep.text(
        "Below a batch, every step trains on all n texts; with 1 text the loss is 0 and the "
        "model is the starting model. Mean ± std over seeds; Δ paired by seed."
    )
    largest = max(r.labels.get("texts", 0) for r in runs)
    values, groups = _score_table(rep, runs, "texts", largest)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for task, color in (("avg", "#1f77b4"), ("STSBenchmark", "#2ca02c"),
                        ("SICKRelatedness", "#9467bd")):  # fmt: skip
        stats = [stat(groups[(v,)], task) for v in values]
        ax.errorbar(values, [st.mean if st else np.nan for st in stats],
                    yerr=[st.std if st else 0 for st in stats], marker="o", capsize=3,
                    color=color, label=_short(task) if task != "avg" else "7-task avg")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("unlabelled texts n (log scale)")
    ax.set_ylabel("test Spearman × 100")
    ax.grid(alpha=0.3)
    ax.legend()
    rep.image(_save(fig, out / "consert_few_shot.png"), "ConSERT few-shot curve")
    _paper_finding(rep, "consert-few-shot")


def section_dualcse_inli(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "method")
    rep.heading("RTE on INLI test per hypothesis type (accuracy × 100)")
    rep.text(
        "Threshold tuned on INLI val (our decision rule, docs/dualcse.md). Mean ± std over seeds; "
        "Δ = DualCSE-cross − SimCSE-sup paired by seed, 95 % t-interval. Paper rows: "
        f"{paper.DUALCSE_TEXT} l.117-118 (its backbone and budget, not ours)."
    )
    kinds = list(paper.HYPOTHESIS_COLUMNS)
    names = {"simcse-sup": "SimCSE-sup (INLI)", "dualcse-cross": "DualCSE-cross"}
    rows = []
    for method in _row_order([m for (m,) in groups], tuple(names)):
        members = groups[(method,)]
        rows.append([names.get(method, str(method)), str(len(members)),
                     *(fmt(stat(members, f"rte_{k}")) for k in kinds)])  # fmt: skip
    base, other = groups.get(("simcse-sup",), []), groups.get(("dualcse-cross",), [])
    deltas = [paired(base, other, f"rte_{k}") for k in kinds]
    rows.append(["Δ (paired)", "", *(fmt_paired(d) for d in deltas)])
    for method, numbers in paper.DUALCSE_RTE.items():
        rows.append([f"paper: {names[method]}", "", *(f"{numbers[k].value:.2f}" for k in kinds)])
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


def section_search(rep: Report, runs: list[RunData], out: Path) -> None:
    """One row per trial: its sampled parameters and scores, best first."""
    params = sorted({k for r in runs for k in r.labels.get("params", {})})
    rep.heading("Trials, best 7-task avg first")
    ranked = sorted(runs, key=lambda r: -r.scores.get("avg", -math.inf))
    rows = [[str(r.labels.get("trial", "?")), *(str(r.labels["params"].get(p)) for p in params),
             *(fmt_num(r.scores.get(t)) for t in ("STSBenchmark", "SICKRelatedness", "avg"))]
            for r in ranked]  # fmt: skip
    rep.table(["trial", *params, "STS-B", "SICK-R", "avg"], rows)


SECTIONS = {
    "main": section_main,
    "ablation": section_ablation,
    "uniformity": section_uniformity,
    "few-shot": section_few_shot,
    "sensitivity": section_sensitivity,
    "augmentations": section_augmentations,
    "dense": dense.section_dense,
    "dup-corpus": dense.section_dup_corpus,
    "noise-mode": dense.section_noise_mode,
    "consert-augmentations": section_consert_augmentations,
    "consert-few-shot": section_consert_few_shot,
    "dualcse-inli": section_dualcse_inli,
    "retrieval-indomain": retrieval_indomain.section,
}


def _sources(experiment: str) -> str:
    """Which paper's numbers and findings the report quotes, and where they are read from."""
    papers = paper.EXPERIMENT_PAPERS.get(experiment, ((paper.PAPER, paper.PAPER_TEXT),))
    cited = "; ".join(f"{name}, read from {text}" for name, text in papers)
    return (
        f"Paper numbers and findings: {cited} (text summaries; the PDFs were not available "
        "offline), each with its line. Kept in dclr/experiments/paper.py."
    )


# What the CPU-scale runs of an experiment train on, for the report's caveat.
CPU_SCALE_DATA = {
    "dup-corpus": "duplicate-rich corpora built from train / dev splits",
    "consert-few-shot": "n texts of ConSERT's 89,192 STS texts",
    "dualcse-inli": "INLI train",
    "retrieval-indomain": "the paraphrase retrieval task's 8,388 unlabelled test passages",
}


SCORES = {
    "dualcse-inli": "RTE accuracy × 100 on INLI test of the final model.",
    "retrieval-indomain": "nDCG@10 and Recall@10 × 100 on the paraphrase retrieval task's "
    "test queries (trec_eval's definitions), final model.",
}


def build_report(
    experiment: str,
    registry: Registry,
    out_dir: Path,
    scale: str | None = None,
    html_out: bool = False,
) -> Path:
    """Write OUT_DIR/report.md (+ report.html) and the PNGs; returns the Markdown path."""
    if experiment not in SECTIONS and not experiment.startswith("search:"):
        raise ConfigError(f"unknown experiment {experiment!r}; choose from {', '.join(SECTIONS)}")
    runs, incomplete = load_runs(registry, experiment, scale)
    if not runs:
        raise ConfigError(
            f"no complete run of {experiment!r}"
            + (f" at scale {scale!r}" if scale else "")
            + f" in the index {registry.db_path}; run `dclr experiment run {experiment}` first"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):  # a report's folder holds only its current plots
        old.unlink()
    scales = sorted({r.labels.get("scale", "?") for r in runs})
    rep = Report(f"DCLR reproduction: {experiment}", [])
    description = EXPERIMENTS[experiment][1] if experiment in EXPERIMENTS else "search"
    backbones = sorted({r.labels.get("backbone", "?") for r in runs})
    rep.text(
        f"{description}. Scale: {', '.join(scales)}; backbone(s): {', '.join(backbones)}; "
        f"{len({r.run_dir for r in runs})} complete runs, seeds "
        f"{', '.join(str(s) for s in sorted({r.seed for r in runs}))}"
        + (f"; {incomplete} incomplete run(s) left out" if incomplete else "")
        + ". Scores: "
        + SCORES.get(
            experiment, "Spearman × 100 of cosine similarity on the STS test sets of best/."
        )
    )
    if scales == ["cpu"]:
        rep.text(
            f"CPU scale ({ANALYSIS_BACKBONE['cpu']} on "
            f"{CPU_SCALE_DATA.get(experiment, 'the STS corpus')}, minutes per run) is a "
            "smoke-scale reproduction: it checks the pipeline and the direction of effects, "
            "not the paper's magnitudes (see docs/reproduction-log.md)."
        )
    section = section_search if experiment.startswith("search:") else SECTIONS[experiment]
    section(rep, runs, out_dir)
    rep.heading("Sources")
    rep.text(_sources(experiment))
    md = out_dir / "report.md"
    md.write_text(rep.markdown())
    if html_out:
        (out_dir / "report.html").write_text(rep.html())
    return md
