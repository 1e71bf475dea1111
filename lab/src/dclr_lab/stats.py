"""The statistics of the experiment reports: per-seed runs, mean ± sample std, and paired
differences with their 95 % t-interval (the studies' report sections render them)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dclr_lab.registry import Registry


@dataclass
class Stat:
    """Mean and sample standard deviation (ddof 1; 0 for a single seed) of per-seed values."""

    mean: float
    std: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Stat | None:  # None: a missing score
        vals = [float(v) for v in values if v is not None and math.isfinite(v)]
        if not vals:
            return None
        std = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
        return cls(float(np.mean(vals)), std, len(vals))

    def fmt(self, digits: int = 2) -> str:
        if self.n == 1:
            return f"{self.mean:.{digits}f}"
        return f"{self.mean:.{digits}f} ± {self.std:.{digits}f}"


@dataclass
class Paired:
    """Paired difference b - a over the seeds both have: mean, sample std, n and the 95 %
    t-interval mean ± t(0.975, n-1) · std / √n (no interval for a single seed)."""

    mean: float
    std: float
    n: int
    low: float
    high: float

    @classmethod
    def of(cls, a: dict[int, float], b: dict[int, float]) -> Paired | None:
        seeds = sorted(set(a) & set(b))
        diffs = [b[s] - a[s] for s in seeds]
        if not diffs:
            return None
        mean = float(np.mean(diffs))
        if len(diffs) == 1:
            return cls(mean, 0.0, 1, math.nan, math.nan)
        from scipy.stats import t

        std = float(np.std(diffs, ddof=1))
        half = float(t.ppf(0.975, len(diffs) - 1)) * std / math.sqrt(len(diffs))
        return cls(mean, std, len(diffs), mean - half, mean + half)

    @property
    def beyond_noise(self) -> bool:
        """The 95 % interval excludes 0."""
        return self.n > 1 and (self.low > 0 or self.high < 0)

    def fmt(self, digits: int = 2) -> str:
        if self.n == 1:
            return f"{self.mean:+.{digits}f} (1 seed)"
        return f"{self.mean:+.{digits}f} [{self.low:+.{digits}f}, {self.high:+.{digits}f}]"


def fmt_paired(p: Paired | None, digits: int = 2) -> str:
    return "—" if p is None else p.fmt(digits)


def by_seed(runs: list[RunData], key: str) -> dict[int, float]:
    """seed -> score `key` (runs without it are left out)."""
    return {r.seed: float(r.scores[key]) for r in runs if r.scores.get(key) is not None}


def paired(a: list[RunData], b: list[RunData], key: str) -> Paired | None:
    """b - a on `key`, paired by seed (same seed: same batches and dropout stream)."""
    return Paired.of(by_seed(a, key), by_seed(b, key))


def fmt(stat: Stat | None, digits: int = 2) -> str:
    return "—" if stat is None else stat.fmt(digits)


def fmt_num(value: float | None, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "—"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


@dataclass
class RunData:
    """One (run, place) pair of an experiment: labels, STS test scores, run folder.

    `scores` are the best model's STS test scores plus `dev`, the best STS-B dev score the run
    selected its model by (absent for runs without dev evaluation); `before` the starting model's
    STS test scores (results.json "before"; empty when the run has none)."""

    labels: dict[str, Any]
    scores: dict[str, float]
    run_dir: Path
    seed: int
    before: dict[str, float] = field(default_factory=dict)


def load_runs(registry: Registry, experiment: str, scale: str | None) -> tuple[list[RunData], int]:
    """Complete runs of `experiment` (optionally one scale) and the count of incomplete ones."""
    runs, incomplete = [], 0
    for row, labels in registry.experiment_runs(experiment):
        if scale is not None and labels.get("scale") != scale:
            continue
        if row["status"] != "complete":
            incomplete += 1
            continue
        results = json.loads(row["results_json"])
        run_dir = Path(row["run_id"])
        run_dir = run_dir if run_dir.is_absolute() else registry.root / run_dir
        scores = dict(results.get("after") or {})
        for kind, value in (results.get("rte_test") or {}).items():  # DualCSE / SimCSE-sup on INLI
            scores[f"rte_{kind}"] = value
        if results.get("best_dev_metric") is not None:
            scores["dev"] = float(results["best_dev_metric"])
        before = dict(results.get("before") or {})
        search = results.get("retrieval") or {}  # run.test_retrieval: x 100, as the STS scores
        for key, value in (search.get("after") or {}).items():
            scores[f"retrieval_{key}"] = float(value)
        for key, value in (search.get("before") or {}).items():
            before[f"retrieval_{key}"] = float(value)
        runs.append(RunData(labels, scores, run_dir, int(row["seed"]), before))
    return runs, incomplete


def group(runs: list[RunData], *keys: str) -> dict[tuple[Any, ...], list[RunData]]:
    out: dict[tuple[Any, ...], list[RunData]] = defaultdict(list)
    for run in runs:
        out[tuple(run.labels.get(k) for k in keys)].append(run)
    return dict(out)


def stat(runs: list[RunData], key: str) -> Stat | None:
    return Stat.of(r.scores.get(key) for r in runs)


def _as_stat(d: Paired | None) -> Stat | None:
    """A paired difference as a bar: mean, with the 95 % half-width as its error bar."""
    if d is None:
        return None
    return Stat(d.mean, 0.0 if d.n == 1 else d.high - d.mean, d.n)


def versus_start(runs: list[RunData], key: str) -> Paired | None:
    """after - before on `key`, by seed (the starting model's score is the same for every seed)."""
    return Paired.of(
        {r.seed: float(r.before[key]) for r in runs if key in r.before},
        {r.seed: float(r.scores[key]) for r in runs if key in r.scores},
    )
