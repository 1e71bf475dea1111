"""The reports' plots: matplotlib without a display, one PNG per figure (`dclr report`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dclr.lab_api import write_with
from dclr_lab.stats import Paired, Stat

COLORS = {"simcse": "#1f77b4", "dclr": "#d62728", "paper": "#7f7f7f"}
DPI = 120  # readable on screen, small files


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, dpi=DPI, format=path.suffix[1:]))
    _pyplot().close(fig)
    return path


def _bars(
    path: Path,
    title: str,
    labels: list[str],
    series: Mapping[str, Sequence[Stat | None]],
    ylabel: str,
    zoom: bool = False,
) -> Path:
    """Grouped bars with std error bars; a series named 'paper' is drawn hatched grey.

    `zoom`: the y axis spans the data (not from 0), for scores that differ by tenths; the title
    says so."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(labels) + 2), 4))
    width = 0.8 / max(1, len(series))
    x = np.arange(len(labels))
    for i, (name, stats) in enumerate(series.items()):
        means = [s.mean if s else np.nan for s in stats]
        key = name.split(" ")[0].lower()
        errs = None if key == "paper" else [s.std if s else 0 for s in stats]  # one number
        ax.bar(
            x + (i - (len(series) - 1) / 2) * width,
            means,
            width,
            yerr=errs,
            capsize=3,
            label=name,
            color=COLORS.get(key),
            hatch="//" if key == "paper" else None,
            edgecolor="black",
            linewidth=0.5,
        )
    long = any(len(label) > 12 for label in labels)
    ax.set_xticks(x, labels, rotation=20 if long else 0, ha="right" if long else "center")
    ax.set_title(title)
    values = [s.mean + sign * s.std for stats in series.values() for s in stats if s
              for sign in (-1, 1)]  # fmt: skip
    if zoom and values:
        low, high = min(values), max(values)
        margin = max(0.5, 0.15 * (high - low))
        ax.set_ylim(low - margin, high + margin)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} (y axis zoomed: it does not start at 0)", fontsize=10)
    else:
        ax.set_ylabel(ylabel)
        ax.axhline(0, color="black", linewidth=0.5)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


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
