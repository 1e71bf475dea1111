"""The NaN stop without a host synchronisation per step.

A non-finite loss must stop the run before any checkpoint or exported model holds its effect
(`TrainingDiverged` names the last intact checkpoint). Reading the loss on the host (`.item()`,
`bool(torch.isfinite(loss))`) makes the CPU wait for the GPU every step, so the GPU idles while
the next step is prepared. With `lazy=True` (the loop's choice on a GPU) the check runs on the
device: the first non-finite step is kept in a device tensor and read by `check()`, which the loop
calls before it logs, evaluates, checkpoints or exports. With `lazy=False` (the CPU, where reading
costs nothing) `observe` raises at once, as the loop always did.
"""

from __future__ import annotations

import torch

from dclr.errors import TrainingDiverged

NONE_YET = -1  # no non-finite step seen


class FiniteGuard:
    """Watches every step's loss; raises `TrainingDiverged` at the first non-finite one."""

    def __init__(self, lazy: bool) -> None:
        self.lazy = lazy
        self._first: torch.Tensor | None = None  # device scalar: first bad step (1-based)

    def observe(self, loss: torch.Tensor, step: int, last_checkpoint: str | None) -> None:
        """The loss of 0-based `step`."""
        if not self.lazy:
            if not torch.isfinite(loss):
                raise TrainingDiverged(step + 1, last_checkpoint)
            return
        bad = ~torch.isfinite(loss.detach())
        if self._first is None:
            self._first = torch.full((), NONE_YET, dtype=torch.long, device=loss.device)
        fresh = bad & (self._first == NONE_YET)
        self._first = torch.where(fresh, torch.full_like(self._first, step + 1), self._first)

    def check(self, last_checkpoint: str | None) -> None:
        """Raise if any observed step was non-finite (one read of one device scalar)."""
        if self._first is None:
            return
        first = int(self._first)
        if first != NONE_YET:
            raise TrainingDiverged(first, last_checkpoint)
