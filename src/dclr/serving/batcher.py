"""Dynamic batching: texts from concurrent requests share one forward pass.

Requests append their texts to a queue and await a future. One worker takes everything queued
(up to `max_batch_texts`, whole requests only), runs the encode function once on a single-thread
executor (the model's own intra-op threads do the parallel work), and hands each request its rows.
While a batch runs, new requests queue up, so under load batches fill by themselves; `max_wait_s`
only matters when the server is idle. The queue is bounded (`max_pending_texts`): beyond it a
request is refused at once with `Overloaded` instead of holding memory.

Without concurrency (one request at a time) this reduces to calling the encode function per
request, plus one event-loop hop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

# Texts per forward pass: past ~64 short sentences a CPU forward pass no longer gets cheaper per
# text, and a larger batch only delays the requests at its front.
MAX_BATCH_TEXTS = 64
# Idle-server wait for company before encoding: 2 ms is small against a forward pass (~10 ms+).
MAX_WAIT_S = 0.002
# Texts waiting at most: 8 full batches; at 8192 characters each that bounds queued text to
# ~64 MiB even with adversarial inputs.
MAX_PENDING_TEXTS = 512

EncodeFn = Callable[[list[str]], Sequence[np.ndarray]]


class Overloaded(Exception):
    """The queue is full: the caller should retry later (HTTP 503)."""


@dataclass
class BatcherStats:
    """Counters exposed by /health: how much batching happened."""

    requests: int = 0
    batches: int = 0
    texts: int = 0
    largest_batch: int = 0
    pending_texts: int = 0
    refused: int = 0


@dataclass
class _Item:
    texts: list[str]
    future: asyncio.Future = field(repr=False)


class EmbeddingBatcher:
    """Collects texts from concurrent `submit` calls into batches for `encode`.

    encode: list of n texts -> a sequence of arrays whose first axis is n (e.g. vectors (n, d)
    and token counts (n,)); each caller receives its own rows of every array.
    """

    def __init__(
        self,
        encode: EncodeFn,
        max_batch_texts: int = MAX_BATCH_TEXTS,
        max_wait_s: float = MAX_WAIT_S,
        max_pending_texts: int = MAX_PENDING_TEXTS,
    ) -> None:
        if max_batch_texts < 1 or max_pending_texts < 1 or max_wait_s < 0:
            raise ValueError("batch and queue sizes must be >= 1, max_wait_s >= 0")
        self.encode = encode
        self.max_batch_texts = max_batch_texts
        self.max_wait_s = max_wait_s
        self.max_pending_texts = max_pending_texts
        self.stats = BatcherStats()
        self._queue: collections.deque[_Item] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dclr-encode")

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The single model thread (other model work, e.g. search, can share it)."""
        return self._executor

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._worker = asyncio.create_task(self._run(), name="dclr-batcher")

    async def close(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        for item in self._queue:
            if not item.future.done():
                item.future.set_exception(Overloaded("the server is shutting down"))
        self._queue.clear()
        self._executor.shutdown(wait=True)

    async def submit(self, texts: list[str]) -> list[np.ndarray]:
        """Encode `texts` with whatever else is queued; returns this request's rows."""
        if self._wakeup is None:
            raise RuntimeError("EmbeddingBatcher.start() was not awaited")
        if self.stats.pending_texts + len(texts) > self.max_pending_texts:
            self.stats.refused += 1
            raise Overloaded(
                f"{self.stats.pending_texts} texts are already waiting (limit "
                f"{self.max_pending_texts}); retry shortly"
            )
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queue.append(_Item(texts, future))
        self.stats.pending_texts += len(texts)
        self.stats.requests += 1
        self._wakeup.set()
        return await future

    def _take_batch(self) -> list[_Item]:
        """Whole requests from the front, up to max_batch_texts (at least one request)."""
        batch = [self._queue.popleft()]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= self.max_batch_texts:
            item = self._queue.popleft()
            batch.append(item)
            size += len(item.texts)
        return batch

    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                if self.max_wait_s:  # idle until now: give concurrent callers a moment
                    await asyncio.sleep(self.max_wait_s)
            batch = []
            for item in self._take_batch():
                if item.future.cancelled():  # the client went away while queued
                    self.stats.pending_texts -= len(item.texts)
                else:
                    batch.append(item)
            texts = [text for item in batch for text in item.texts]
            if not texts:
                continue
            try:
                outputs = await loop.run_in_executor(self._executor, self.encode, texts)
            except Exception as err:  # the encode error belongs to these requests, not the loop
                outputs, error = None, err
            else:
                error = None
            self.stats.batches += 1
            self.stats.texts += len(texts)
            self.stats.largest_batch = max(self.stats.largest_batch, len(texts))
            start = 0
            for item in batch:
                stop = start + len(item.texts)
                self.stats.pending_texts -= len(item.texts)
                if not item.future.done():
                    if error is not None:
                        item.future.set_exception(error)
                    else:
                        assert outputs is not None
                        item.future.set_result([array[start:stop] for array in outputs])
                start = stop
