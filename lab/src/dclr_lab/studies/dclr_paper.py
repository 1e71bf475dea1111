"""The DCLR paper's STS studies, SimCSE and DCLR runs of one recipe each: the main table per
backbone (`main`), Table 6's ablations (`ablation`), uniformity vs step (`uniformity`), less
training data (`few-shot`) and sweeps of φ and k (`sensitivity`): their runs and report sections,
next to the paper's numbers (`dclr_lab.paper`)."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from typing import Any, cast

import numpy as np

from dclr.lab_api import STS_TASKS, read_metrics
from dclr_lab import paper
from dclr_lab.names import method_label, task_label
from dclr_lab.plots import COLORS, _bars, _pyplot, _save
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE, BACKBONES, RunSpec, pair_spec
from dclr_lab.stats import (
    Paired,
    RunData,
    Stat,
    _as_stat,
    fmt,
    fmt_num,
    fmt_paired,
    group,
    paired,
    stat,
)
from dclr_lab.studies.shared import paper_finding

# Table 6 rows: variant -> DCLR overrides.
ABLATIONS: dict[str, dict[str, Any]] = {
    "full": {},
    "no_noise": {"noise_mode": "none"},
    "no_weighting": {"weighting": "none"},
    "random_noise": {"noise_mode": "random"},
    "self_weighting": {"weighting": "self"},
    "distill": {"weighting": "distill"},
}
# Few-shot training-data fractions, 100% down to the paper's smallest, 0.3%.
FEW_SHOT_FRACTIONS = (1.0, 0.3, 0.1, 0.03, 0.01, 0.003)
# Sensitivity sweeps (our grid around the paper defaults phi = 0.9, k = 1).
SWEEPS: dict[str, tuple[float, ...]] = {
    "false_negative_threshold": (0.5, 0.7, 0.8, 0.9, 0.95),
    "noise_ratio": (0.25, 0.5, 1.0, 2.0, 4.0),
}


# ---- runs -------------------------------------------------------------------------------------
def main_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    return [
        pair_spec(scale, backbone, seed, method)
        for backbone in BACKBONES[scale]
        for method in ("simcse", "dclr")
        for seed in seeds
    ]


def ablation_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for variant, overrides in ABLATIONS.items():
        for seed in seeds:
            spec = pair_spec(scale, backbone, seed, "dclr", overrides)
            specs.append(dataclasses.replace(spec, labels={**spec.labels, "variant": variant}))
    return specs


def uniformity_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    return [
        pair_spec(scale, backbone, seed, method) for method in ("simcse", "dclr") for seed in seeds
    ]


def few_shot_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for fraction in FEW_SHOT_FRACTIONS:
        for method in ("simcse", "dclr"):
            for seed in seeds:
                spec = pair_spec(scale, backbone, seed, method)
                specs.append(
                    dataclasses.replace(
                        spec,
                        labels={**spec.labels, "fraction": fraction},
                        corpus_fraction=fraction,
                    )
                )
    return specs


def sensitivity_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for param, values in SWEEPS.items():
        for value in values:
            for seed in seeds:
                spec = pair_spec(scale, backbone, seed, "dclr", {param: value})
                labels = {**spec.labels, "param": param, "value": value}
                specs.append(dataclasses.replace(spec, labels=labels))
    return specs


# ---- report sections --------------------------------------------------------------------------
def _paper_ref(backbone: str) -> tuple[str, str]:
    """The paper backbone to compare with: the same one, else BERT-base (the analyses' model)."""
    return (backbone, "") if (backbone, "dclr") in paper.MAIN_AVG else ("bert-base", " (BERT-base)")


def section_main(rep: Report, runs: list[RunData], out: Path) -> None:
    rep.heading("STS test, Spearman × 100 (mean ± std over seeds)")
    header = ["backbone", "method", "seeds", *(task_label(t) for t in STS_TASKS), "avg"]
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
    # DCLR's released estimator when the runs logged it (run.released_geometry): the one the
    # paper's curve was drawn with; else the whole-set definition over the STS-B dev sentences
    released = _curves(runs, "uniformity_released")
    if released and all(steps for steps, _ in released.values()):  # every method logged it
        curves = released  # no step 0: the starting model's before.json is a test-mode eval
        where = "released estimator: batches of 128 STS-B train + dev pairs; no step 0"
    else:
        curves, where = _curves(runs, "uniformity"), "STS-B dev sentences"
    rep.heading(f"Uniformity loss ℓ_uniform vs training step ({where})")
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
    ax.set_title(f"ℓ_uniform = log E exp(−2‖x−y‖²), {where}; band ± std over seeds",
                 fontsize=9)  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend()
    rep.image(_save(fig, out / "uniformity.png"), "uniformity vs step")
    paper_finding(rep, "uniformity")


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
        ax.set_ylabel(f"{task_label(task)} test Spearman × 100")
        ax.set_title(task_label(task))
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
                    drops.append(f"{method_label(m)} {task_label(task)} "
                                 f"{100 * (b.mean - a.mean) / a.mean:+.1f} %")  # fmt: skip
        if drops:
            rep.text(f"Ours, {100 * least:g}% vs {100 * full:g}% of the data (relative change of "
                     f"the mean): {'; '.join(drops)}.")  # fmt: skip
    paper_finding(rep, "few-shot", " No per-point numbers are kept, so none is drawn.")


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
                        color=color, label=f"{task_label(task)} (ours)")  # fmt: skip
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
    paper_finding(rep, "sensitivity")
