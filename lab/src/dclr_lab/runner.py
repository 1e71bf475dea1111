"""Run an experiment: resolve its specs into configs, train what is missing, register every run.

Run folders live under ROOT/runs/<method>-<model>-<config hash>: the folder name is a function of
the config only, so experiments that need the same run share it. A run is
- skipped when its folder holds results.json (complete);
- resumed from its newest checkpoint when the folder has one (an interrupted run);
- started from scratch otherwise.
After each run the folder gets labels.json (which experiments use it) and the SQLite index
(`dclr_lab.registry`) is updated; the trainer itself knows nothing of either.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dclr.lab_api import (
    ConfigError,
    LockHeld,
    TrainConfig,
    few_shot_indices,
    flat_values,
    latest_checkpoint,
    load_config,
)
from dclr_lab.registry import Registry, config_hash, set_labels
from dclr_lab.runspec import RunSpec, default_recipes_dir
from dclr_lab.specs import experiment_specs

RUNS_DIR = "runs"
CORPORA_DIR = "corpora"
ROOT_TOKEN = "$ROOT"  # stands for the experiments root inside hashed configs


@dataclass
class Planned:
    """A resolved run: its config and folder, its places in the experiment, and the action."""

    spec: RunSpec
    config: TrainConfig
    run_dir: Path
    action: str  # skip | resume | start
    labels: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # empty: a dependency


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", Path(text.split(":")[-1]).name).strip("_")[:40]


# Options added after experiments had run, at the default that reproduces the older runs: left
# out of the hash while they hold it, so those run folders keep their names (and are found,
# not retrained). Any other value is hashed as usual.
HASH_NEUTRAL_DEFAULTS: dict[str, object] = {
    "no_duplicates": False,
    "dedup": False,
    "eval_retrieval": None,
    "eval_retrieval_split": "dev",
    "test_retrieval": None,
    "complementary_rows": "auto",  # the same vectors either way: a run's numbers do not change
    "column": None,  # a text-file corpus, as before the option existed
}


# Options that became hash-neutral late (session 38) after folders had been named with them at
# their defaults: the pair rules' from 2026-12-03, async_checkpoints' and prepared_mask's from
# 2026-12-06. A folder named so is found under its name (the runs of those days), never renamed.
HASHED_BEFORE: tuple[tuple[str, ...], ...] = (
    ("false_negative_rule", "pair_margin"),
    ("false_negative_rule", "pair_margin", "async_checkpoints"),
    ("false_negative_rule", "pair_margin", "async_checkpoints", "prepared_mask"),
)


def _portable_values(config: TrainConfig, root: Path) -> dict[str, Any]:
    """The config's flat values with the root folder replaced by a token (a moved root keeps its
    ids), the options at `HASH_NEUTRAL_DEFAULTS` left out."""
    prefix = str(root.resolve())
    return {
        k: v.replace(prefix, ROOT_TOKEN) if isinstance(v, str) else v
        for k, v in flat_values(config).items()
        if not (k in HASH_NEUTRAL_DEFAULTS and v == HASH_NEUTRAL_DEFAULTS[k])
    }


def portable_hash(config: TrainConfig, root: Path, hashed: tuple[str, ...] = ()) -> str:
    """Config hash of `_portable_values` (`hashed`: as `registry.config_hash`'s)."""
    return config_hash(_portable_values(config, root), hashed)


def named_dirs(
    config: TrainConfig, root: Path, namings: tuple[tuple[str, ...], ...] = ((),)
) -> list[Path]:
    """ROOT/runs/<method>-<model>-<hash> under each naming (() today's, `HASHED_BEFORE`'s the
    older ones), distinct, in that order; the config's values read once."""
    values = _portable_values(config, root)
    stem = f"{config.method}-{_slug(config.model.name)}-"
    runs = root / RUNS_DIR
    return list(dict.fromkeys((runs / (stem + config_hash(values, h))).resolve() for h in namings))


def furthest(candidates: list[tuple[TrainConfig, Path]]) -> tuple[TrainConfig, Path]:
    """The candidate whose folder is furthest along: complete, then one with a checkpoint, then
    the first (today's name, where a new run starts)."""
    rank = {"skip": 0, "resume": 1, "start": 2}
    return min(candidates, key=lambda found: rank[action_for(found[1])])  # stable: first on ties


def run_dir_for(config: TrainConfig, root: Path) -> Path:
    """The run folder of `config`: a function of the config alone, so equal runs share it; a
    folder of the same run named before session 38 (`HASHED_BEFORE`) is found under its name.
    (A run whose complementary model is another run: `resolve`, which names both alike.)"""
    return furthest([(config, d) for d in named_dirs(config, root, ((), *HASHED_BEFORE))])[1]


def subset_corpus(config: TrainConfig, fraction: float, seed: int, root: Path) -> str:
    """Write a seeded random `fraction` of the config's corpus (at least one batch) to a file."""
    from dclr.lab_api import load_corpus

    name = f"{_slug(config.data.corpus)}-f{fraction:g}-s{seed}.txt"
    path = root / CORPORA_DIR / name
    if not path.is_file():
        corpus = load_corpus(config.data.corpus, config.data.data_dir, config.data.column)
        # The one few-shot sampler (as `data.few_shot_fraction` with random sampling).
        chosen = few_shot_indices(
            len(corpus), fraction=fraction, sampling="random", seed=seed,
            minimum=config.optimisation.batch_size,
        ) or []  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(" ".join(corpus[int(i)].split()) + "\n" for i in chosen))
        tmp.replace(path)
    return str(path.resolve())


def resolve(
    spec: RunSpec,
    root: Path,
    recipes_dir: Path,
    overrides: dict[str, Any] | None = None,
    materialize: bool = True,
    hashed: tuple[str, ...] | None = None,
) -> tuple[TrainConfig, Path]:
    """Spec -> validated TrainConfig and its run folder (creates corpus subsets if asked).
    `hashed`: the folder under that older naming alone, its complementary run's too (the run
    was trained pointing at that folder); None: the folder furthest along of today's name (the
    complementary run where it is) and each older naming's (`HASHED_BEFORE`)."""

    def config_for(dep_dir: Path | None) -> TrainConfig:
        values = {"seed": spec.seed, **spec.overrides, **(overrides or {})}
        if dep_dir is not None:
            values["complementary_model"] = str((dep_dir / "best").resolve())
            values["complementary_pooler"] = None  # what the SimCSE best/ folder records
        config = load_config(recipes_dir / spec.recipe, values)
        if spec.corpus_fraction < 1:
            if materialize:
                config.data.corpus = subset_corpus(config, spec.corpus_fraction, spec.seed, root)
            else:  # planning only: the path the subset will have
                slug = f"{_slug(config.data.corpus)}-f{spec.corpus_fraction:g}-s{spec.seed}.txt"
                config.data.corpus = str((root / CORPORA_DIR / slug).resolve())
            config.data.column = None  # the subset is a text file, one sentence per line
        return config

    dep = spec.complementary_from
    if hashed is not None:
        dep_dir = None if dep is None else resolve(dep, root, recipes_dir, overrides,
                                                   materialize, hashed)[1]  # fmt: skip
        config = config_for(dep_dir)
        (run_dir,) = named_dirs(config, root, (hashed,))
    elif dep is None:
        config = config_for(None)
        run_dir = run_dir_for(config, root)
    else:
        config = config_for(resolve(dep, root, recipes_dir, overrides, materialize)[1])
        config, run_dir = furthest([
            (config, named_dirs(config, root)[0]),
            *(resolve(spec, root, recipes_dir, overrides, materialize, h) for h in HASHED_BEFORE),
        ])  # fmt: skip
    config.run.output_dir = str(run_dir)
    return config, run_dir


def shard_runs(
    runs: list[Planned],
    shard: tuple[int, int],
    root: Path,
    recipes_dir: Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> list[Planned]:
    """`--shard k/n`: the runs at positions k, k + n, k + 2n, ... of the plan; a ConfigError if
    one of them needs a complementary run that is not complete (another shard's, perhaps)."""
    k, n = shard
    if not 0 <= k < n:
        raise ConfigError(f"--shard {k}/{n}: need 0 <= k < n")
    mine = [r for i, r in enumerate(runs) if i % n == k]
    where = recipes_dir or default_recipes_dir()
    for item in mine:
        dep = item.spec.complementary_from
        if dep is None or not item.labels:  # no dependency, or a dependency itself
            continue
        _, dep_dir = resolve(dep, root, where, overrides, materialize=False)
        if action_for(dep_dir) != "skip":
            raise ConfigError(
                f"--shard {k}/{n}: {item.run_dir.name} needs {dep_dir.name}, which is not "
                "complete; train the dependencies first (run without --shard)"
            )
    return mine


def action_for(run_dir: Path) -> str:
    if (run_dir / "results.json").is_file():
        return "skip"
    if latest_checkpoint(run_dir / "checkpoints") is not None:
        return "resume"
    return "start"


def label_matches(labels: dict[str, Any], only: dict[str, list[str]] | None) -> bool:
    """Whether a spec's labels hold one of the wanted values for every key of `only`
    (`{"density": ["0.5", "0"]}`; numbers compare as numbers, so "0" matches 0.0)."""
    for key, wanted in (only or {}).items():
        if key not in labels:
            return False
        value = labels[key]
        if not any(_same_label(value, w) for w in wanted):
            return False
    return True


def _same_label(value: Any, wanted: str) -> bool:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    return str(value) == wanted


def parse_only(items: list[str] | None) -> dict[str, list[str]]:
    """`--only KEY=V1,V2` options -> {KEY: [V1, V2]} (repeated keys: every condition holds)."""
    out: dict[str, list[str]] = {}
    for item in items or []:
        key, sep, values = item.partition("=")
        if not sep or not key or not values:
            raise ConfigError(f"--only {item!r}: expected LABEL=VALUE[,VALUE...], e.g. density=0.5")
        out.setdefault(key.strip(), []).extend(v.strip() for v in values.split(","))
    return out


def plan(
    name: str,
    scale: str,
    n_seeds: int,
    root: Path,
    recipes_dir: Path | None = None,
    overrides: dict[str, Any] | None = None,
    materialize: bool = False,
    only: dict[str, list[str]] | None = None,
) -> list[Planned]:
    """Every run the experiment needs (dependencies first), deduplicated by run folder; `only`
    keeps the runs whose labels match (`label_matches`), e.g. one setting's cells first."""
    recipes_dir = recipes_dir or default_recipes_dir()
    planned: dict[Path, Planned] = {}
    specs = [
        s
        for s in experiment_specs(name, scale, n_seeds)
        if label_matches({**s.labels, "seed": s.seed}, only)  # `seed` selects too
    ]
    if only and not specs:
        raise ConfigError(f"--only {only}: no run of experiment {name!r} has these labels")
    for spec in specs:
        chain: list[RunSpec] = []
        dep = spec.complementary_from
        while dep is not None:  # complementary models are trained before the runs that use them
            chain.insert(0, dep)
            dep = dep.complementary_from
        for item in [*chain, spec]:
            config, run_dir = resolve(item, root, recipes_dir, overrides, materialize)
            entry = planned.setdefault(run_dir, Planned(item, config, run_dir, action_for(run_dir)))
            labels = {**item.labels, "scale": scale}
            if item is spec and labels not in entry.labels:
                entry.labels.append(labels)
    return list(planned.values())


def launcher_train(
    launcher: str, run: Callable[..., Any] = subprocess.run
) -> Callable[[TrainConfig, bool], None]:
    """A `train` that runs `LAUNCHER -m dclr train` in a subprocess (e.g. "torchrun
    --nproc_per_node 4" for DDP on 4 GPUs), so the runner itself stays one process."""

    def train(config: TrainConfig, resume: bool) -> None:
        run_dir = Path(config.run.output_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        if resume:
            args = ["--resume", str(run_dir)]
        else:
            recipe = run_dir / "requested.yaml"  # the resolved config handed to `dclr train`
            config.save(recipe)
            args = [str(recipe)]
        command = [*shlex.split(launcher.replace("{python}", sys.executable))]
        run([*command, "-m", "dclr", "train", *args], check=True)

    return train


def run_experiment(
    name: str,
    scale: str = "cpu",
    n_seeds: int = 1,
    root: Path = Path("experiments"),
    recipes_dir: Path | None = None,
    overrides: dict[str, Any] | None = None,
    train: Callable[[TrainConfig, bool], Any] | None = None,
    log: Callable[[str], None] = print,
    shard: tuple[int, int] | None = None,
    only: dict[str, list[str]] | None = None,
) -> list[Planned]:
    """Train every missing run of the experiment, then label and register each run folder.

    `shard=(k, n)`: only the runs at positions k, k + n, k + 2n, ... of the plan, so n processes
    (or machines sharing ROOT) split an experiment. A run whose complementary-model dependency
    belongs to another shard must find it complete: start the shards after the dependencies
    (`--shard` is meant for independent runs, e.g. every CPU-scale experiment)."""
    if train is None:
        from dclr.lab_api import run_training

        train = run_training
    root = Path(root)
    runs = plan(name, scale, n_seeds, root, recipes_dir, overrides, materialize=True, only=only)
    if shard is not None:
        runs = shard_runs(runs, shard, root, recipes_dir, overrides)
    busy = []
    with Registry(root) as registry:
        for i, item in enumerate(runs, 1):
            # decided now, not at planning: another process sharing ROOT may have run it since
            item.action = action_for(item.run_dir)
            log(f"[{i}/{len(runs)}] {item.action} {item.run_dir.name} {item.labels}")
            if item.action != "skip":
                try:
                    train(item.config, item.action == "resume")
                except LockHeld as err:  # another process (a shard of another experiment that
                    item.action = "busy"  # shares this run) is training it: go on without it
                    busy.append(item.run_dir.name)
                    log(f"  busy, left for later: {err}".splitlines()[0])
                    continue
            if item.labels:  # a dependency (complementary model) is no cell of the experiment
                set_labels(item.run_dir, name, item.labels)
            registry.register(item.run_dir)
    if busy:
        log(f"{len(busy)} run(s) were being trained by another process: {', '.join(busy)}; run "
            "this command again once it finishes, and they are labelled (or resumed) then")  # fmt: skip
    return runs
