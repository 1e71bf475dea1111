"""The records of an experiment's runs, without their models: evidence a repository can keep.

A run folder holds models and checkpoints (hundreds of MB) beside a few small files that say what
the run was and what it scored. `archive_experiment` copies those small files of every complete
run an experiment uses into `DEST/runs/<run folder>/`, so DEST is itself an experiments root:

- `dclr report NAME --root DEST` rebuilds the report from the archive alone (no model is needed:
  reports read scores from results.json; the index, a binary file not kept in the archive, is
  built from the records on first use);
- copying `DEST/runs/*` into another root makes `dclr experiment run NAME` there skip the archived
  runs (their folder holds results.json) and train only the missing ones, so an experiment too long
  for one machine session can be finished in the next.

The archive is written into a temporary folder and renamed into place when complete.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from dclr.lab_api import DclrError, InputError, staged_folder
from dclr_lab.registry import LABELS_FILE, Registry, find_run_dirs, read_run

# What a run's record is: config and environment, scores, which experiments use it, the logged
# curves, its identity and the starting model's scores. Models, checkpoints, tensorboard: not kept.
RECORD_FILES = (
    "config.yaml",
    "env.json",
    "results.json",
    LABELS_FILE,
    "metrics.jsonl",
    "run.json",
    "before.json",
)
RUNS_DIR = "runs"


@dataclass(frozen=True)
class Archived:
    """What `archive_experiment` wrote: the folder and the run folders' names in it."""

    dest: Path
    runs: tuple[str, ...]
    skipped_incomplete: tuple[str, ...]


def archive_experiment(experiment: str, root: Path, dest: Path) -> Archived:
    """Copy the records (RECORD_FILES) of `experiment`'s complete runs under `root` to
    `dest/runs/<name>/`. Incomplete runs are left out and named; no run at all is an error."""
    root, dest = Path(root), Path(dest)
    runs: list[Path] = []
    incomplete: list[Path] = []
    for run_dir in find_run_dirs(root):
        record = read_run(run_dir, run_dir.name)
        if experiment not in record.labels:
            continue
        (runs if record.status == "complete" else incomplete).append(run_dir)
    if not runs:
        raise InputError(
            f"no complete run of experiment {experiment!r} under {root}"
            + (f" ({len(incomplete)} incomplete)" if incomplete else ""),
            fix=f"run `dclr experiment run {experiment} --root {root}` first",
        )
    names = [p.name for p in runs]
    if len(set(names)) != len(names):
        raise DclrError(f"two run folders of {experiment!r} under {root} share a name: {names}")
    with staged_folder(dest) as tmp:
        for run_dir in runs:
            target = tmp / RUNS_DIR / run_dir.name
            target.mkdir(parents=True)
            for name in RECORD_FILES:
                if (run_dir / name).is_file():
                    shutil.copy2(run_dir / name, target / name)
    return Archived(dest, tuple(sorted(names)), tuple(sorted(p.name for p in incomplete)))


def restore_records(archive: Path, root: Path) -> list[str]:
    """Copy an archive's run records into `root/runs/` (folders already there are kept as they
    are) and re-index `root`; returns the names restored. The runner then skips those runs."""
    archive, root = Path(archive), Path(root)
    source = archive / RUNS_DIR
    if not source.is_dir():
        raise InputError(
            f"{archive} holds no {RUNS_DIR}/ folder", fix="pass a `dclr runs archive` output"
        )
    restored = []
    for run_dir in sorted(p for p in source.iterdir() if p.is_dir()):
        target = root / RUNS_DIR / run_dir.name
        if target.exists():
            continue
        with staged_folder(target) as tmp:
            for file in run_dir.iterdir():
                if file.is_file():
                    shutil.copy2(file, tmp / file.name)
        restored.append(run_dir.name)
    with Registry(root) as registry:
        registry.rebuild()
    return restored
