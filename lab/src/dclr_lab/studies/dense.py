"""The false-negative studies (issues 12 and 23): paraphrase-dense batches in two settings
(`dense`), duplicate-rich corpora (`dup-corpus`) and noise negatives where they matter
(`noise-mode`): their runs and their report sections."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dclr.lab_api import read_metrics
from dclr_lab.names import DENSE_COLORS, DENSE_LABELS, DENSE_SETTING_NAMES, PRACTICAL_DELTA
from dclr_lab.plots import _pyplot, _save
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE, RunSpec, pair_spec
from dclr_lab.stats import (
    Paired,
    RunData,
    Stat,
    fmt,
    fmt_paired,
    group,
    paired,
    stat,
    versus_start,
)

# Paraphrase-dense batches (issues 12, 23): rho = share of each batch made of gold paraphrase
# pairs; rho x batch / 2 must be whole (batch 64: 4, 8 and 16 pairs).
DENSITIES = (0.0, 0.125, 0.25, 0.5)
# Two training settings (issue 23): the recipes' [CLS] + SimCSE's train-only MLP head, and the
# one sentence-transformers users train in (mean pooling, no head; `dclr.st.DCLRLoss`). Both
# keep the recipes' 60 steps at lr 3e-5, so the committed [CLS] cells and the new ones share
# one budget.
DENSE_SETTINGS: dict[str, dict[str, Any]] = {
    "cls_head": {},
    "mean": {"pooler": "mean", "mlp_head": False},
}
# variant -> (method, overrides): SimCSE, DCLR as the paper writes it, and DCLR without each part.
DENSE_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "simcse": ("simcse", {}),
    "dclr": ("dclr", {}),
    "dclr_no_noise": ("dclr", {"noise_mode": "none"}),
    "dclr_no_weighting": ("dclr", {"weighting": "none"}),
    # phi from MiniLM-mean's own random-pair cosines (top 0.1 % dropped: phi ~ 0.52), the
    # calibration the audit (docs/results/cpu-scale/audit) finds to transfer across scorers.
    "dclr_calibrated": (
        "dclr",
        {"phi_calibration": "random_pairs", "phi_calibration_target": 0.001},
    ),
    # the model being trained scores its own negatives (no complementary model)
    "dclr_self": ("dclr", {"weighting": "self"}),
    # the cheap fix a user tries first: SimCSE with no two equal lines in a batch
    "simcse_no_dup": ("simcse", {"no_duplicates": True}),
}
# The variants of each setting. "Without noise" equals the paper form to 0.01 at the paper's
# sigma and beta, and "without weighting" equalled SimCSE to 0.00 at every rho of the issue-12
# [CLS] table (docs/results/cpu-scale/dense-cls-head-issue12), so neither setting repeats them
# (the ablation experiment keeps both, at rho = 0).
DENSE_SETTING_VARIANTS: dict[str, tuple[str, ...]] = {
    "cls_head": ("simcse", "dclr", "dclr_calibrated", "simcse_no_dup"),
    "mean": ("simcse", "dclr", "dclr_calibrated", "dclr_self", "simcse_no_dup"),
}
# Variants run at some densities only (CPU budget), per setting: in [CLS], calibrated phi where
# there are no gold false negatives (does it cost anything?) and where they are densest.
DENSE_VARIANT_DENSITIES: dict[tuple[str, str], tuple[float, ...]] = {
    ("cls_head", "dclr_calibrated"): (0.0, 0.5),
}
# The dense runs skip dev evaluation (best/ = final/, the model after a fixed budget): the
# table compares models at equal steps, and dev evaluations would add ~40 % to a CPU run.
DENSE_SCALE_OVERRIDES: dict[str, dict[str, Any]] = {"cpu": {"eval_steps": 0}, "paper": {}}


def specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:  # seed-major: each finished seed is a complete paired comparison
        for setting, setting_overrides in DENSE_SETTINGS.items():
            for density in DENSITIES:
                for variant in DENSE_SETTING_VARIANTS[setting]:
                    wanted = DENSE_VARIANT_DENSITIES.get((setting, variant), DENSITIES)
                    if density not in wanted:
                        continue
                    method, overrides = DENSE_VARIANTS[variant]
                    extra = {
                        **DENSE_SCALE_OVERRIDES[scale],
                        **setting_overrides,
                        **overrides,
                        "paraphrase_density": density,
                    }
                    spec = pair_spec(scale, backbone, seed, method, extra)
                    labels = {**spec.labels, "setting": setting, "variant": variant,
                              "density": density}  # fmt: skip
                    specs.append(dataclasses.replace(spec, labels=labels))
    return specs


# Duplicate-rich corpora a user could meet (issue 23; dclr.data.realistic), in the
# sentence-transformers setting: SimCSE, the duplicate-free sampler and DCLR (paper form and
# calibrated phi), at the dense experiment's budget.
DUP_CORPORA = ("scraped", "clusters")
DUP_CORPUS_VARIANTS = ("simcse", "simcse_no_dup", "dclr", "dclr_calibrated")


def dup_corpus_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:
        for corpus in DUP_CORPORA:
            for variant in DUP_CORPUS_VARIANTS:
                method, overrides = DENSE_VARIANTS[variant]
                extra = {**DENSE_SCALE_OVERRIDES[scale], **DENSE_SETTINGS["mean"], **overrides,
                         "corpus": corpus}  # fmt: skip
                spec = pair_spec(scale, backbone, seed, method, extra)
                labels = {**spec.labels, "setting": "mean", "variant": variant, "corpus": corpus}
                specs.append(dataclasses.replace(spec, labels=labels))
    return specs


# Noise-based negatives where they change the loss (issue 23 item 6): sigma = 0.1, beta = 1
# turns each noise vector ~80-94 degrees in t = 4 steps and gives the noise ~60-70 % of the
# loss's denominator (docs/results/cpu-scale/noise-sweep, both settings), against the paper's
# sigma = 1, beta = 1e-3 (0.01 degrees, a 4e-6 share). rho = 0, the sentence-transformers
# setting, DCLR otherwise in its paper form; noise_mode optimized vs random (t = 0) vs none.
NOISE_MODE_OVERRIDES: dict[str, Any] = {"noise_std": 0.1, "noise_step_size": 1.0}
NOISE_MODES = ("optimized", "random", "none")


def noise_mode_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    backbone = ANALYSIS_BACKBONE[scale]
    specs = []
    for seed in seeds:
        for mode in NOISE_MODES:
            extra = {**DENSE_SCALE_OVERRIDES[scale], **DENSE_SETTINGS["mean"],
                     **NOISE_MODE_OVERRIDES, "noise_mode": mode, "paraphrase_density": 0.0}  # fmt: skip
            spec = pair_spec(scale, backbone, seed, "dclr", extra)
            labels = {**spec.labels, "setting": "mean", "noise_mode": mode}
            specs.append(dataclasses.replace(spec, labels=labels))
    return specs


DENSE_TASKS = ("avg", "STSBenchmark", "SICKRelatedness")


def mean_logged(run: RunData, key: str) -> float | None:
    """Mean of a training metric over the run's logged steps (e.g. dropped_fraction)."""
    values = [float(r[key]) for r in read_metrics(run.run_dir, "train") if key in r]
    return float(np.mean(values)) if values else None


def _setting(run: RunData) -> str:
    return str(run.labels.get("setting", "cls_head"))  # runs before issue 23 had one setting


def _verdict(d: Paired) -> str:
    if d.beyond_noise and abs(d.mean) >= PRACTICAL_DELTA:
        return "above" if d.mean > 0 else "below"
    if d.beyond_noise:  # e.g. +0.004 [+0.001, +0.007]: real but below the table's resolution
        return f"within {PRACTICAL_DELTA} of"
    return "not distinguishable from"


def _variant_row(
    first: str, variant: str, base: list[RunData], members: list[RunData]
) -> list[str]:
    """One row of the dense / dup-corpus tables: scores, dropped %, paired Δ against `base`
    (SimCSE in the same cell) and against the starting model."""
    drop = Stat.of(x for r in members if (x := mean_logged(r, "dropped_fraction")) is not None)
    deltas = [paired(base, members, k) if variant != "simcse" else None for k in DENSE_TASKS]
    return [first, DENSE_LABELS[variant], str(len(members)),
            *(fmt(stat(members, k)) for k in DENSE_TASKS),
            "—" if drop is None else f"{100 * drop.mean:.3f}",
            *(fmt_paired(d) for d in deltas),
            fmt_paired(versus_start(members, "avg"))]  # fmt: skip


def _dense_rows(
    groups: dict, setting: str, densities: list, variants: list[str]
) -> list[list[str]]:
    rows = []
    for rho in densities:
        base = groups.get((setting, rho, "simcse"), [])
        for v in variants:
            members = groups.get((setting, rho, v), [])
            if members:
                rows.append(_variant_row(f"{rho:g}", v, base, members))
    return rows


def _dense_verdicts(groups: dict, setting: str, densities: list) -> list[str]:
    """The comparisons the issue asks about, in words: DCLR vs SimCSE and vs the duplicate-free
    sampler, calibrated phi vs phi = 0.9, each against the seed spread."""
    pairs = [("simcse", "dclr"), ("simcse", "dclr_calibrated"), ("simcse_no_dup", "dclr"),
             ("simcse", "simcse_no_dup"), ("dclr", "dclr_calibrated"),
             ("simcse", "dclr_self")]  # fmt: skip
    lines = []
    for rho in densities:
        for a, b in pairs:
            d = paired(groups.get((setting, rho, a), []), groups.get((setting, rho, b), []), "avg")
            if d is None:
                continue
            seeds = f", {d.n} seeds" if d.n > 1 else ""
            lines.append(f"ρ = {rho:g}: {DENSE_LABELS[b]} is {_verdict(d)} {DENSE_LABELS[a]} on "
                         f"the 7-task avg (Δ {d.fmt()}{seeds}).")  # fmt: skip
    return lines


def section_dense(rep: Report, runs: list[RunData], out: Path) -> None:
    groups: dict[tuple[Any, ...], list[RunData]] = defaultdict(list)
    for run in runs:
        groups[(_setting(run), run.labels.get("density"), run.labels.get("variant"))].append(run)
    settings = [s for s in DENSE_SETTING_NAMES if any(k[0] == s for k in groups)]
    header = ["ρ", "variant", "seeds", "avg", "STS-B", "SICK-R", "dropped %", "Δ avg",
              "Δ STS-B", "Δ SICK-R", "Δ avg vs start"]  # fmt: skip
    rep.text(
        "ρ: share of every batch made of gold paraphrase pairs (train splits; both sentences of a "
        "pair in the same batch). avg: 7-task STS average, mean ± std over seeds. Δ: paired by "
        "seed against SimCSE at the same ρ and setting (same batches and dropout stream), mean "
        "[95 % t-interval]; Δ avg vs start: against the starting model (all-MiniLM-L6-v2 "
        "evaluated with the setting's pooler). dropped %: share of in-batch negatives DCLR's "
        "weighting removed, mean over logged steps."
    )
    for setting in settings:
        densities = sorted({k[1] for k in groups if k[0] == setting})
        variants = [v for v in DENSE_LABELS if any(k[0] == setting and k[2] == v for k in groups)]
        members = [r for k, rs in groups.items() if k[0] == setting for r in rs]
        start = Stat.of(r.before.get("avg") for r in members if r.before)
        rep.heading(f"{DENSE_SETTING_NAMES[setting]}: STS test after training (Spearman × 100)")
        if start is not None:
            rep.text(f"Starting model, this setting's pooler: 7-task avg {start.mean:.2f}.")
        rep.table(header, _dense_rows(groups, setting, densities, variants))
        lines = _dense_verdicts(groups, setting, densities)
        if lines:
            rep.text(" ".join(lines))
        rows = []
        zero = groups.get((setting, 0.0, "simcse"), [])
        for rho in densities:
            simcse = groups.get((setting, rho, "simcse"), [])
            rows.append([f"{rho:g}", fmt(stat(simcse, "avg")),
                         fmt_paired(paired(zero, simcse, "avg") if rho else None),
                         fmt_paired(paired(zero, simcse, "STSBenchmark") if rho else None),
                         fmt_paired(versus_start(simcse, "avg"))])  # fmt: skip
        rep.text("Does SimCSE suffer from paraphrase-dense batches in this setting?")
        rep.table(["ρ", "SimCSE avg", "Δ avg vs ρ = 0 (paired)", "Δ STS-B vs ρ = 0",
                   "Δ avg vs start"], rows)  # fmt: skip
    rep.image(_dense_plot(groups, settings, out / "dense.png"), "dense batches")
    rep.text(
        "One panel per setting: the 7-task avg against ρ, a line per method (mean over seeds) "
        "with its seed band (min to max) and each seed as a dot; the dashed line is the starting "
        "model with the setting's pooler."
    )


def _dense_plot(groups: dict, settings: list[str], path: Path) -> Path:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(settings), figsize=(6.5 * len(settings), 4.8), squeeze=False)
    for ax, setting in zip(axes[0], settings, strict=True):
        densities = sorted({k[1] for k in groups if k[0] == setting})
        variants = [v for v in DENSE_LABELS if any(k[0] == setting and k[2] == v for k in groups)]
        for v in variants:
            xs, means, lows, highs = [], [], [], []
            for rho in densities:
                vals = [r.scores["avg"] for r in groups.get((setting, rho, v), [])
                        if "avg" in r.scores]  # fmt: skip
                if not vals:
                    continue
                ax.scatter([rho] * len(vals), vals, color=DENSE_COLORS[v], s=10, alpha=0.6)
                xs.append(rho)
                means.append(float(np.mean(vals)))
                lows.append(min(vals))
                highs.append(max(vals))
            ax.plot(xs, means, color=DENSE_COLORS[v], marker="o", ms=3, label=DENSE_LABELS[v])
            ax.fill_between(xs, lows, highs, color=DENSE_COLORS[v], alpha=0.15, linewidth=0)
        starts = [r.before["avg"] for k, rs in groups.items() if k[0] == setting for r in rs
                  if "avg" in r.before]  # fmt: skip
        if starts:
            ax.axhline(float(np.mean(starts)), color="black", linestyle="--", linewidth=0.8,
                       label="starting model")  # fmt: skip
        ax.set_title(DENSE_SETTING_NAMES[setting], fontsize=10)
        ax.set_xlabel("paraphrase density ρ (share of the batch in gold pairs)")
        ax.set_ylabel("7-task STS avg (Spearman × 100)")
        ax.set_xticks(densities, [f"{d:g}" for d in densities])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


DUP_CORPUS_NAMES = {
    "scraped": "scraped: STS-B + SICK train, 28.6 % of lines a copy (exact, case or whitespace)",
    "clusters": "clusters: SNLI dev premises + entailments, INLI train premises + explicit "
    "entailments (22.7 % exact repeats, the rest paraphrase clusters)",
}


def section_dup_corpus(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "corpus", "variant")
    corpora = [c for c in DUP_CORPUS_NAMES if any(k[0] == c for k in groups)]
    rep.text(
        "Mean pooling, no head (the sentence-transformers setting), 60 steps of batch 64 at lr "
        "3e-5 on each corpus (dclr.data.realistic; no test split). Δ: paired by seed against "
        "SimCSE on the same corpus, mean [95 % t-interval]; Δ vs start: against the starting "
        "model (all-MiniLM-L6-v2, mean pooling)."
    )
    header = ["corpus", "variant", "seeds", "avg", "STS-B", "SICK-R", "dropped %", "Δ avg",
              "Δ STS-B", "Δ SICK-R", "Δ avg vs start"]  # fmt: skip
    rows, lines = [], []
    for corpus in corpora:
        base = groups.get((corpus, "simcse"), [])
        for v in [v for v in DENSE_LABELS if (corpus, v) in groups]:
            rows.append(_variant_row(corpus, v, base, groups[(corpus, v)]))
        for a, b in (("simcse", "simcse_no_dup"), ("simcse", "dclr"), ("simcse_no_dup", "dclr"),
                     ("dclr", "dclr_calibrated")):  # fmt: skip
            d = paired(groups.get((corpus, a), []), groups.get((corpus, b), []), "avg")
            if d is not None:
                lines.append(f"{corpus}: {DENSE_LABELS[b]} is {_verdict(d)} {DENSE_LABELS[a]} "
                             f"(Δ avg {d.fmt()}).")  # fmt: skip
    rep.heading("STS test after training on a duplicate-rich corpus (Spearman × 100)")
    rep.text(" ".join(DUP_CORPUS_NAMES[c] + "." for c in corpora))
    rep.table(header, rows)
    if lines:
        rep.text(" ".join(lines))


NOISE_MODE_NAMES = {
    "optimized": "optimized noise (t = 4 ascent steps)",
    "random": "random noise (t = 0)",
    "none": "no noise negatives",
}


def section_noise_mode(rep: Report, runs: list[RunData], out: Path) -> None:
    groups = group(runs, "noise_mode")
    modes = [m for m in NOISE_MODE_NAMES if (m,) in groups]
    rep.text(
        "DCLR (paper-form weighting, φ = 0.9, frozen starting model as the complementary model) "
        "with σ = 0.1, β = 1, k = 1 × batch, t = 4: the noise setting where the noise holds "
        "~60 % of the loss's denominator (docs/results/cpu-scale/noise-sweep). Mean pooling, no "
        "head, ρ = 0, 60 steps of batch 64 at lr 3e-5, STS corpus. Δ: paired by seed against "
        "no noise negatives, mean [95 % t-interval]; Δ vs start: against the starting model."
    )
    base = groups.get(("none",), [])
    rows = []
    for mode in modes:
        members = groups[(mode,)]
        deltas = [paired(base, members, k) if mode != "none" else None for k in DENSE_TASKS]
        rows.append([NOISE_MODE_NAMES[mode], str(len(members)),
                     *(fmt(stat(members, k)) for k in DENSE_TASKS),
                     *(fmt_paired(d) for d in deltas),
                     fmt_paired(versus_start(members, "avg"))])  # fmt: skip
    rep.heading("STS test after training, by noise mode (Spearman × 100)")
    rep.table(["noise", "seeds", "avg", "STS-B", "SICK-R", "Δ avg", "Δ STS-B", "Δ SICK-R",
               "Δ avg vs start"], rows)  # fmt: skip
    lines = []
    for a, b in (("none", "optimized"), ("none", "random"), ("random", "optimized")):
        d = paired(groups.get((a,), []), groups.get((b,), []), "avg")
        if d is not None:
            lines.append(f"{NOISE_MODE_NAMES[b].capitalize()} is {_verdict(d)} "
                         f"{NOISE_MODE_NAMES[a]} (Δ avg {d.fmt()}, {d.n} seeds).")  # fmt: skip
    if lines:
        rep.text(" ".join(lines))
