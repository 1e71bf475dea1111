"""What the reports call the experiments' variants and settings, and their plot colours."""

from __future__ import annotations

# Smallest difference (Spearman x 100) called "above" / "below": the tables' resolution is 0.01,
# and a 0.004 shift whose interval excludes 0 is real but of no practical size.
PRACTICAL_DELTA = 0.05
DENSE_LABELS = {
    "simcse": "SimCSE",
    "simcse_no_dup": "SimCSE, no duplicates in a batch",
    "dclr": "DCLR (paper form)",
    "dclr_no_noise": "DCLR w/o noise negatives",
    "dclr_no_weighting": "DCLR w/o instance weighting",
    "dclr_calibrated": "DCLR, calibrated φ",
    "dclr_self": "DCLR, self weighting",
}
DENSE_COLORS = dict(
    zip(
        DENSE_LABELS,
        ("#1f77b4", "#17becf", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"),
        strict=True,
    )
)
# STS tasks whose class name is long, as the tables' columns call them.
TASK_NAMES = {"STSBenchmark": "STS-B", "SICKRelatedness": "SICK-R"}
DENSE_SETTING_NAMES = {
    "cls_head": "[CLS] + MLP head (the recipes' setting)",
    "mean": "mean pooling, no head (the sentence-transformers setting)",
}


def task_label(task: str) -> str:
    """An STS task's short name in reports (STS-B, SICK-R; the others as they are)."""
    return TASK_NAMES.get(task, task)


def method_label(name: str) -> str:
    """A method's short name in reports (`Method.label`, declared by the method); a name no
    method is registered under is shown as it is."""
    from dclr.lab_api import ConfigError, get_method

    try:
        return get_method(name).label or name
    except ConfigError:
        return name
