"""Batches prepared one step ahead, on a background thread (`optimisation.prefetch`).

The loop asks for batch `step` and names the one it will want next; while the device runs step
`step`, a thread collates (tokenises) step + 1 and pins its tensors, so the copy to the GPU can be
`non_blocking` and the host never sits idle between two steps. Collation is a pure function of
the step (`dclr.data.sampler`; the methods' collates draw no random numbers), so a prefetched
batch equals the one the loop would have built itself.

Fast tokenizers are not safe to call from two threads at once ("Already borrowed"), so the loop
`settle()`s the thread before it encodes anything itself (dev evaluation).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

T = TypeVar("T")


class Prefetcher(Generic[T]):
    """`get(step, then)` returns `make(step)`, and starts `make(then)` on a thread (if enabled)."""

    def __init__(self, make: Callable[[int], T], enabled: bool) -> None:
        self.make = make
        self.enabled = enabled
        self._pool = (
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="dclr-prefetch")
            if enabled
            else None
        )
        self._pending: dict[int, Future[T]] = {}

    def get(self, step: int, then: int | None = None) -> T:
        """Batch `step` (prepared ahead if it was asked for), then `then` starts preparing."""
        future = self._pending.pop(step, None)
        item = future.result() if future is not None else self.make(step)
        self.settle()  # anything else in flight is for a step not asked for: drop it
        self._pending.clear()
        if self._pool is not None and then is not None:
            self._pending[then] = self._pool.submit(self.make, then)
        return item

    def settle(self) -> None:
        """Wait for the work in flight (kept for `get`), so the caller may tokenise itself."""
        for future in self._pending.values():
            future.exception()  # waits; an error surfaces when that batch is asked for

    def close(self) -> None:
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
