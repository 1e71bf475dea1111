"""ConSERT's studies (issue 16), with its own settings: its view strategies
(`consert-augmentations`) and n unlabelled texts (`consert-few-shot`): their runs and report
sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from dclr.lab_api import RATED
from dclr_lab.names import task_label
from dclr_lab.plots import _paired_bars, _pyplot, _save
from dclr_lab.render import Report
from dclr_lab.runspec import ANALYSIS_BACKBONE, SCALE_OVERRIDES, RunSpec, recipe_file
from dclr_lab.stats import RunData, paired, stat
from dclr_lab.studies.augmentations import CUTOFF_RATE
from dclr_lab.studies.shared import paper_finding, score_table

# ConSERT's settings on top of its recipe (consert.txt l.68, l.79; released --no_dropout): mean
# pooling in training, last-two-layer mean at evaluation, backbone dropout off under the views.
# The paper-scale recipe already holds them.
CONSERT_SETTINGS: dict[str, dict[str, Any]] = {
    "cpu": {"pooler": "mean", "eval_pooler": "avg_top2", "dropout": 0.0},
    "paper": {},
}
# (label, view1, view2): ConSERT's strategies (consert.txt l.71) as the second view against a
# plain first view (row "None" of its view1 x view2 grid, l.89-91), its best pair
# (shuffle + feature cutoff, l.90), and the old backbone-dropout view with dropout on (the view
# the earlier CPU table called "dropout") for comparison.
CONSERT_VIEW_PAIRS: tuple[tuple[str, str, str], ...] = (
    ("none", "none", "none"),
    ("token_shuffle", "none", "token_shuffle"),
    ("token_cutoff", "none", "token_cutoff"),
    ("feature_cutoff", "none", "feature_cutoff"),
    ("embedding_dropout", "none", "embedding_dropout"),
    ("token_shuffle+feature_cutoff", "token_shuffle", "feature_cutoff"),
    ("backbone_dropout (old view)", "dropout", "dropout"),
)
# ConSERT's few-shot sizes (consert.txt l.92: 1, 10, 100, 1,000, 10,000 and all 89,192 texts),
# per scale: 10,000 and all are out of the CPU budget; at paper scale "all" is the recipe's
# corpus unchanged (no subset drawn), so the claim that 1,000 texts come close to all of them
# can be tested there.
CONSERT_ALL_TEXTS = 89_192  # sts_all with the shared data (`dclr.data.sts.all_texts`)
CONSERT_FEW_SHOT_TEXTS: dict[str, tuple[int, ...]] = {
    "cpu": (1, 10, 100, 1000),
    "paper": (1, 10, 100, 1000, 10_000, CONSERT_ALL_TEXTS),
}


# ---- runs -------------------------------------------------------------------------------------
def _consert(scale: str, seed: int, labels: dict[str, Any], overrides: dict[str, Any]) -> RunSpec:
    base = {**SCALE_OVERRIDES[scale], **CONSERT_SETTINGS[scale], **overrides}
    return RunSpec(recipe_file("consert", scale, ANALYSIS_BACKBONE[scale]), seed,
                   {"backbone": ANALYSIS_BACKBONE[scale], "method": "consert", **labels}, base)  # fmt: skip


def augmentations_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    specs = []
    for label, view1, view2 in CONSERT_VIEW_PAIRS:
        overrides = {"view1": view1, "view2": view2,
                     "view1_rate": CUTOFF_RATE if view1 in RATED else 0.0,
                     "view2_rate": CUTOFF_RATE if view2 in RATED else 0.0}  # fmt: skip
        if view1 == "dropout":  # the old view needs the backbone's dropout on
            overrides["dropout"] = None
        specs += [_consert(scale, seed, {"view": label}, overrides) for seed in seeds]
    return specs


def few_shot_specs(scale: str, seeds: list[int]) -> list[RunSpec]:
    # ConSERT's corpus (sts_all), a seeded random n of it; fewer texts than a batch train on all
    # of them every step (data.small_data: shrink_batch, what a DataLoader's only, partial batch
    # does in the released code); with 1 text NT-Xent has no negative and the model is unchanged.
    def subset(n: int) -> dict[str, Any]:
        if n == CONSERT_ALL_TEXTS:  # the whole corpus, as the recipe trains it
            return {"corpus": "sts_all"}
        return {"corpus": "sts_all", "few_shot_sentences": n, "few_shot_sampling": "random",
                "small_data": "shrink_batch"}  # fmt: skip

    return [
        _consert(scale, seed, {"texts": n}, subset(n))
        for n in CONSERT_FEW_SHOT_TEXTS[scale]
        for seed in seeds
    ]


# ---- report sections --------------------------------------------------------------------------
def section_augmentations(rep: Report, runs: list[RunData], out: Path) -> None:
    rep.heading("ConSERT's view strategies (its settings: mean pooling, no backbone dropout)")
    rep.text(
        "Each row: view 1 none (plain), view 2 the strategy; the pair row is ConSERT's best "
        "(consert.txt l.90); the last row is the old backbone-dropout view with dropout on. "
        "Mean ± std over seeds; Δ paired by seed."
    )
    order = tuple(label for label, _, _ in CONSERT_VIEW_PAIRS)
    values, groups = score_table(rep, runs, "view", "none", order)
    others = [v for v in values if v != "none"]
    deltas = [paired(groups.get(("none",), []), groups[(v,)], "avg") for v in others]
    path = _paired_bars(out / "consert_views.png",
                        "ConSERT views vs no augmentation (green/red: interval excludes 0)",
                        "Δ 7-task STS avg vs view 'none' (paired by seed), 95 % t-interval",
                        [str(v) for v in others], deltas)  # fmt: skip
    rep.image(path, "ConSERT view deltas")
    paper_finding(rep, "consert-augmentations")


def section_few_shot(rep: Report, runs: list[RunData], out: Path) -> None:
    rep.heading("ConSERT with n unlabelled texts")
    rep.text(
        "Below a batch, every step trains on all n texts; with 1 text the loss is 0 and the "
        "model is the starting model. Mean ± std over seeds; Δ paired by seed."
    )
    largest = max(r.labels.get("texts", 0) for r in runs)
    values, groups = score_table(rep, runs, "texts", largest)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for task, color in (("avg", "#1f77b4"), ("STSBenchmark", "#2ca02c"),
                        ("SICKRelatedness", "#9467bd")):  # fmt: skip
        stats = [stat(groups[(v,)], task) for v in values]
        ax.errorbar(values, [st.mean if st else np.nan for st in stats],
                    yerr=[st.std if st else 0 for st in stats], marker="o", capsize=3,
                    color=color, label=task_label(task) if task != "avg" else "7-task avg")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("unlabelled texts n (log scale)")
    ax.set_ylabel("test Spearman × 100")
    ax.grid(alpha=0.3)
    ax.legend()
    rep.image(_save(fig, out / "consert_few_shot.png"), "ConSERT few-shot curve")
    paper_finding(rep, "consert-few-shot")
