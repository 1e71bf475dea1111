"""A benchmark's report on disk: the JSON, its markdown table beside it, both written atomically
(`dclr.atomic`: a cut run never leaves half a results file), and the table printed; and its
provenance, the code and machine that produced it."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dclr.atomic import write_text

ROOT = Path(__file__).resolve().parent.parent
# Set by scripts/device_gpu_check.sh from `scripts/device_bundle.py --stamp` (a tree without .git)
SOURCE_COMMIT_ENV = "DCLR_SOURCE_COMMIT"
SOURCE_DIRTY_ENV = "DCLR_SOURCE_DIRTY"  # "1": src/ or benchmarks/ differed from that commit


def _git(root: Path, *args: str) -> str | None:
    """`git args` run in `root`: its output, or None without git or outside a repository."""
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _field(read: Callable[[], Any]) -> Any:
    """`read()`, or None where it fails: a report saves its numbers whatever is missing."""
    try:
        return read()
    except Exception:
        return None


def _loadavg() -> list[float] | None:
    return _field(lambda: [round(x, 2) for x in os.getloadavg()])


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _dclr_version() -> str:
    from dclr._meta import __version__

    return __version__


def _recording_name() -> str:
    from dclr.models.cpu_kind import recording_name

    return recording_name()


def source_state(root: Path = ROOT) -> tuple[str | None, bool | None]:
    """(the commit checked out at `root`, whether src/ or benchmarks/ differ from it), each None
    without git or outside a repository. The reports themselves (benchmarks/results/) are not the
    code: a rewritten one is no change. `scripts/device_bundle.py --stamp` records the same."""
    commit = (_git(root, "rev-parse", "HEAD") or "").strip() or None
    status = _git(root, "status", "--porcelain", "--", "src", "benchmarks", ":!benchmarks/results")
    return commit, None if status is None else bool(status.strip())


def provenance(root: Path = ROOT) -> dict[str, Any]:
    """The code and machine a run starts on: the checkout's commit (outside a repository,
    $DCLR_SOURCE_COMMIT's) and whether src/ or benchmarks/ (its results aside) had uncommitted
    changes (None where git or the repository is missing), the
    versions of dclr and torch, the CPU's recording name and the load average now."""
    commit, changed = source_state(root)
    if not commit:  # a copied tree (a lent GPU machine): the commit it was copied from, if given
        commit = os.environ.get(SOURCE_COMMIT_ENV, "").strip()
        dirty = os.environ.get(SOURCE_DIRTY_ENV, "").strip()
        changed = {"1": True, "0": False}.get(dirty) if commit else None
    return {
        "git_commit": commit or None,
        "uncommitted_changes": changed,
        "dclr": _field(_dclr_version),
        "torch": _field(_torch_version),
        "cpu": _field(_recording_name),
        "loadavg_start": _loadavg(),
    }


def finished(start: dict[str, Any]) -> dict[str, Any]:
    """`start` (a `provenance()`) with the load average at the end of the run added."""
    return {**start, "loadavg_end": _loadavg()}


def save_report(out: Path, report: dict[str, Any], table: str) -> None:
    """`report` as `out` (.json), `table` as `out` with suffix .md; the table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(report, indent=2) + "\n")
    write_text(out.with_suffix(".md"), table)
    print(table)
