"""Metrics to a JSONL file in the run folder and to TensorBoard."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Append-only JSONL (one record per line) + TensorBoard scalars, truncatable on resume."""

    def __init__(self, run_dir: Path, resume_step: int = 0, tensorboard: bool = True) -> None:
        self.path = run_dir / METRICS_FILE
        if resume_step and self.path.exists():  # drop records the resumed run will redo
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line and json.loads(line).get("step", 0) <= resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
        elif not resume_step:
            self.path.write_text("")
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
    path = Path(run_dir) / METRICS_FILE
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in rows if kind is None or r["kind"] == kind]
