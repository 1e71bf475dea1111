"""Metrics to a JSONL file in the run folder and to TensorBoard."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

from dclr import atomic

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Append-only JSONL (one record per line) + TensorBoard scalars, truncatable on resume."""

    def __init__(self, run_dir: Path, resume_step: int = 0, tensorboard: bool = True) -> None:
        self.path = run_dir / METRICS_FILE
        if resume_step and self.path.exists():  # drop records the resumed run will redo
            kept = [r for r in _records(self.path) if r.get("step", 0) <= resume_step]
            atomic.write_text(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        elif not resume_step:
            atomic.write_text(self.path, "")
        self._writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._writer = SummaryWriter(
                    str(run_dir / "tensorboard"),
                    purge_step=resume_step + 1 if resume_step else None,
                )
            except ImportError:  # tensorboard is optional at run time
                self._writer = None

    def log(self, step: int, kind: str, values: dict[str, Any]) -> None:
        record = {"step": step, "kind": kind, **values}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self._writer is not None:
            for key, value in values.items():
                if isinstance(value, int | float) and math.isfinite(value):
                    self._writer.add_scalar(f"{kind}/{key}", value, step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


def read_metrics(run_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    rows = _records(Path(run_dir) / METRICS_FILE)
    return [r for r in rows if kind is None or r.get("kind") == kind]


def _records(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics file; a line that is not a JSON object (a write cut off by a
    full disk or a power loss) is skipped with a warning naming the file and line."""
    rows = []
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            warnings.warn(
                f"{path}:{number}: not a metrics record (a write cut off?); skipped",
                stacklevel=3,
            )
            continue
        rows.append(record)
    return rows
