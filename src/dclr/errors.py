"""Errors that tell the user what went wrong, where, and how to fix it."""

from __future__ import annotations

from pathlib import Path


class DclrError(Exception):
    """Base class of every error dclr raises on purpose."""


class InputError(DclrError, ValueError):
    """Malformed input: names the file, the line (1-based) and the fix."""

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        fix: str | None = None,
    ) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        self.fix = fix
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}:{line}"
            where += ": "
        text = f"{where}{message}"
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)


class ConfigError(DclrError, ValueError):
    """An option value that cannot work (tau <= 0, batch < 2, unknown pooler, ...)."""


class TrainingDiverged(DclrError, RuntimeError):
    """The loss became NaN or infinite; training stopped at `step`."""

    def __init__(self, step: int, last_checkpoint: str | None) -> None:
        self.step = step
        self.last_checkpoint = last_checkpoint
        kept = (
            f"the last good checkpoint is kept at {last_checkpoint}"
            if last_checkpoint
            else "no checkpoint had been written yet"
        )
        super().__init__(
            f"non-finite loss at step {step}; training stopped, {kept}. "
            "Lower the learning rate, use fp32, or check the data near this step."
        )


class NonFiniteVectors(DclrError, ValueError):
    """An encoder produced NaN or inf: never written, indexed or served as numbers."""
