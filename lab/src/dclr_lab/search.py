"""Hyper-parameter search over any recipe field: a grid, random samples, or both.

Each trial is an ordinary run folder under ROOT/runs (named by its config hash, so a repeated
search skips finished trials and resumes interrupted ones), labelled as experiment `search:NAME`
with its trial number and sampled values, and registered in the index. `parallel` > 1 trains
trials in separate processes, each with an equal share of the CPU threads (or one GPU each).
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from dclr.lab_api import (
    ConfigError,
    TrainConfig,
    checked,
    config_from_dict,
    flat_hints,
    load_config,
)
from dclr_lab.registry import Registry, set_labels
from dclr_lab.runner import action_for, run_dir_for


@dataclass
class SearchSpace:
    """grid: field -> values (every combination); ranges: field -> (low, high, log scale)."""

    grid: dict[str, list[Any]] = field(default_factory=dict)
    ranges: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    trials: int | None = None  # random samples; each also picks a random grid point
    seed: int = 0

    @classmethod
    def parse(
        cls,
        grid: list[str],
        uniform: list[str],
        log_uniform: list[str],
        trials: int | None,
        seed: int = 0,
    ) -> SearchSpace:
        space = cls(trials=trials, seed=seed)
        for item in grid:
            key, values = _split(item)
            space.grid[key] = [_value(v) for v in values.split(",") if v.strip()]
        for items, log in ((uniform, False), (log_uniform, True)):
            for item in items:
                key, bounds = _split(item)
                try:
                    low, high = (float(b) for b in bounds.split(":"))
                except ValueError:
                    raise ConfigError(f"{item!r}: a range is field=low:high") from None
                if not low < high or (log and low <= 0):
                    raise ConfigError(f"{item!r}: need low < high (and low > 0 for log scale)")
                space.ranges[key] = (low, high, log)
        if space.ranges and not trials:
            raise ConfigError("random ranges need --trials N")
        if not space.grid and not space.ranges:
            raise ConfigError("give --grid and/or --uniform/--log-uniform ranges")
        return space

    def points(self) -> list[dict[str, Any]]:
        """The trials' parameter values: the grid, or `trials` random samples."""
        grid = [dict(zip(self.grid, combo, strict=True))
                for combo in itertools.product(*self.grid.values())]  # fmt: skip
        if not self.ranges:
            return grid
        rng = np.random.default_rng(self.seed)
        hints = flat_hints()
        out = []
        for _ in range(self.trials or 0):
            point = dict(grid[int(rng.integers(len(grid)))]) if grid else {}
            for key, (low, high, log) in self.ranges.items():
                value = (math.exp(rng.uniform(math.log(low), math.log(high))) if log
                         else rng.uniform(low, high))  # fmt: skip
                point[key] = round(value) if hints.get(key) is int else float(f"{value:.4g}")
            out.append(point)
        return out


def _value(text: str) -> Any:
    """YAML scalar, with YAML 1.1's string '1e-5' read as the number it means."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _split(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(f"{item!r} must look like field=values")
    key, value = item.split("=", 1)
    return key.strip().replace("-", "_"), value


def trial_configs(
    recipe: Path,
    space: SearchSpace,
    root: Path,
    overrides: dict[str, Any] | None = None,
    name: str = "search",
) -> list[tuple[int, dict[str, Any], TrainConfig]]:
    """(trial number, its parameters, its validated config with output_dir set) per trial."""
    out = []
    for i, params in enumerate(space.points()):
        config = load_config(recipe, {**(overrides or {}), **params})
        config.run.output_dir = str(run_dir_for(config, Path(root)))
        out.append((i, params, config))
    return out


def _train_one(values: dict[str, Any], resume: bool, threads: int) -> str:
    """Worker: train one config (in its own process when parallel)."""
    import torch

    from dclr.lab_api import run_training

    torch.set_num_threads(threads)
    config = checked(config_from_dict(values))
    run_training(config, resume=resume)
    return config.run.output_dir


def run_search(
    recipe: Path,
    space: SearchSpace,
    root: Path,
    name: str,
    overrides: dict[str, Any] | None = None,
    parallel: int = 1,
    log: Callable[[str], None] = print,
    train: Callable[[dict[str, Any], bool, int], str] = _train_one,
) -> str | None:
    """Train every trial not yet complete; returns the best trial's run id (7-task avg)."""
    if parallel < 1:
        raise ConfigError(f"--parallel must be >= 1, got {parallel}")
    experiment = f"search:{name}"
    trials = trial_configs(recipe, space, root, overrides, name)
    threads = max(1, (os.cpu_count() or 1) // parallel)
    with Registry(root) as registry:

        def finish(i: int, params: dict[str, Any], config: TrainConfig) -> None:
            run_dir = Path(config.run.output_dir)
            set_labels(run_dir, experiment, [{"trial": i, "params": params, "scale": "custom"}])
            registry.register(run_dir)

        todo = []
        for i, params, config in trials:
            action = action_for(Path(config.run.output_dir))
            log(f"trial {i}: {action} {params}")
            if action == "skip":
                finish(i, params, config)
            else:
                todo.append((i, params, config, action == "resume"))
        if parallel == 1 or len(todo) <= 1:
            for i, params, config, resume in todo:
                train(config.to_dict(), resume, threads)
                finish(i, params, config)
        else:
            import multiprocessing

            context = multiprocessing.get_context("spawn")  # no forked torch state
            with ProcessPoolExecutor(parallel, mp_context=context) as pool:
                futures = {pool.submit(train, c.to_dict(), r, threads): (i, p, c)
                           for i, p, c, r in todo}  # fmt: skip
                for future in as_completed(futures):
                    future.result()
                    finish(*futures[future])
        ranked = [r for r in registry.experiment_runs(experiment) if r[0]["sts_avg"] is not None]
    if not ranked:
        return None
    best = max(ranked, key=lambda r: r[0]["sts_avg"])
    return f"{best[0]['run_id']} (trial {best[1]['trial']}, avg {best[0]['sts_avg']:.2f})"
