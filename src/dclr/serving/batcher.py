"""Dynamic batching: texts from concurrent requests share one forward pass.

Requests append their texts to a queue and await a future. One worker takes everything queued
(up to `max_batch_texts`, whole requests only), runs the encode function once on a single-thread
executor (the model's own intra-op threads do the parallel work), and hands each request its rows.
While a batch runs, new requests queue up, so under load batches fill by themselves; `max_wait_s`
only matters when the server is idle.

The queue is bounded by work, not by request count: each text costs its characters (a proxy for
its tokens, capped where the model truncates) plus a fixed overhead, and a request is refused at
once with `Overloaded` (HTTP 503 with Retry-After) when the queued cost is over `max_pending_chars`,
the queued texts over `max_pending_texts`, or when the queue would take longer than
`max_queue_wait_s` (or the client's own timeout, when it sends one) to drain at the live
throughput: the moving average of recent batches, lowered as soon as the running batch overruns
it (another job took the cores). So a client either gets
its vectors or a 503 well before a typical 30 s client timeout, never silence. A request whose
client went away (its awaiting task is cancelled) leaves the queue at once and is never encoded.

One bad request fails only itself: when a batch's encode raises, each of its requests is encoded
again alone, so the others get their vectors and the one that fails gets its own error.

Without concurrency (one request at a time) this reduces to calling the encode function per
request, plus one event-loop hop.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

# Texts per forward pass: past ~64 short sentences a CPU forward pass no longer gets cheaper per
# text, and a larger batch only delays the requests at its front.
MAX_BATCH_TEXTS = 64
# Idle-server wait for company before encoding: 2 ms is small against a forward pass (~10 ms+).
MAX_WAIT_S = 0.002
# Texts waiting at most: 8 full batches.
MAX_PENDING_TEXTS = 512
# Characters waiting at most: 8 full batches of ~1000-character texts. The queued text is then a
# few MiB, and on a 2-core CPU with MiniLM about 10-20 s of work (measured ~400 short texts/s).
MAX_PENDING_CHARS = 512_000
# Fixed cost of a text in characters: tokenizer call, [CLS]/[SEP], padding to the batch's longest.
TEXT_OVERHEAD_CHARS = 32
# A text's cost stops growing here: encoders truncate at 512 tokens, about 2-3k characters.
MAX_TEXT_COST_CHARS = 4096
# A request is refused when the queue ahead of it would take longer than this to drain: well
# under the 30-60 s that HTTP clients typically wait, so they get a 503 rather than a timeout.
MAX_QUEUE_WAIT_S = 10.0
# Weight of the newest batch in the throughput estimate (an exponential moving average).
RATE_SMOOTHING = 0.3
# Retry-After bounds in seconds: at least one, at most the queue-wait bound.
MIN_RETRY_AFTER_S = 1

EncodeFn = Callable[[list[str]], Sequence[np.ndarray]]


class Overloaded(Exception):
    """The queue is full: the caller should retry after `retry_after` seconds (HTTP 503)."""

    def __init__(self, message: str, retry_after: int = MIN_RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def text_cost(text: str) -> int:
    """Queue cost of one text in characters (see MAX_PENDING_CHARS)."""
    return min(len(text), MAX_TEXT_COST_CHARS) + TEXT_OVERHEAD_CHARS


@dataclass
class BatcherStats:
    """Counters exposed by /health: how much batching happened."""

    requests: int = 0
    batches: int = 0
    texts: int = 0
    largest_batch: int = 0
    pending_texts: int = 0
    pending_chars: int = 0
    refused: int = 0
    dropped: int = 0  # requests whose client went away before their batch ran
    failed: int = 0  # requests whose own texts made the encoder fail
    chars_per_s: float = 0.0  # measured throughput in cost units (0: not measured yet)


@dataclass
class _Item:
    texts: list[str]
    cost: int
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
        max_pending_chars: int = MAX_PENDING_CHARS,
        max_queue_wait_s: float = MAX_QUEUE_WAIT_S,
    ) -> None:
        if min(max_batch_texts, max_pending_texts, max_pending_chars) < 1 or max_wait_s < 0:
            raise ValueError("batch and queue sizes must be >= 1, max_wait_s >= 0")
        if max_queue_wait_s <= 0:
            raise ValueError("max_queue_wait_s must be > 0")
        self.encode = encode
        self.max_batch_texts = max_batch_texts
        self.max_wait_s = max_wait_s
        self.max_pending_texts = max_pending_texts
        self.max_pending_chars = max_pending_chars
        self.max_queue_wait_s = max_queue_wait_s
        self.stats = BatcherStats()
        self._queue: collections.deque[_Item] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dclr-encode")
        self._running: tuple[int, float] | None = None  # (cost, start) of the batch encoding

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

    def live_rate(self) -> float:
        """Throughput now: the moving average of finished batches, or lower when the batch
        running has already taken longer than that rate allows (the machine got slower, e.g.
        another job took its cores); 0: not measured yet."""
        rate = self.stats.chars_per_s
        if self._running is not None and rate > 0:
            cost, tic = self._running
            elapsed = time.perf_counter() - tic
            if elapsed * rate > cost:  # slower than the estimate: at most cost/elapsed
                rate = cost / elapsed
        return rate

    def estimated_wait_s(self, extra_cost: int = 0) -> float | None:
        """Seconds to drain the queue (plus `extra_cost`) at the live rate; None: unknown."""
        rate = self.live_rate()
        return (self.stats.pending_chars + extra_cost) / rate if rate > 0 else None

    def _refuse(self, reason: str, wait_s: float | None) -> Overloaded:
        self.stats.refused += 1
        wait = wait_s if wait_s is not None else self.estimated_wait_s() or MIN_RETRY_AFTER_S
        ceiling = math.ceil(self.max_queue_wait_s)
        retry = max(MIN_RETRY_AFTER_S, min(math.ceil(wait), ceiling))
        return Overloaded(f"{reason}; retry in {retry} s", retry)

    async def submit(self, texts: list[str], deadline_s: float | None = None) -> list[np.ndarray]:
        """Encode `texts` with whatever else is queued; returns this request's rows.

        Raises Overloaded when the queue cannot take the request (including when it would not
        be done within `deadline_s`, the client's own timeout, when it says one), and the
        encoder's error when these texts (alone) cannot be encoded. Cancelling the awaiting task
        removes the request from the queue.
        """
        if self._wakeup is None:
            raise RuntimeError("EmbeddingBatcher.start() was not awaited")
        cost = sum(text_cost(t) for t in texts)
        stats = self.stats
        if stats.pending_texts + len(texts) > self.max_pending_texts:
            raise self._refuse(
                f"{stats.pending_texts} texts are already waiting (limit {self.max_pending_texts})",
                None,
            )
        if stats.pending_texts and stats.pending_chars + cost > self.max_pending_chars:
            raise self._refuse(
                f"{stats.pending_chars} characters of text are already waiting (limit "
                f"{self.max_pending_chars})",
                None,
            )
        wait = self.estimated_wait_s(cost)
        bound, whose = self.max_queue_wait_s, "max_queue_wait_s"
        if deadline_s is not None and deadline_s < bound:
            bound, whose = deadline_s, "your timeout"
        if stats.pending_texts and wait is not None and wait > bound:
            raise self._refuse(
                f"the queue would take ~{wait:.1f} s to finish this request at the current "
                f"throughput (limit {bound:g} s, {whose})",
                self.estimated_wait_s(),
            )
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        item = _Item(texts, cost, future)
        self._queue.append(item)
        stats.pending_texts += len(texts)
        stats.pending_chars += cost
        stats.requests += 1
        self._wakeup.set()
        try:
            return await future
        except asyncio.CancelledError:
            if item in self._queue:  # still waiting: drop it now, not when its turn comes
                self._queue.remove(item)
                self._release(item)
                stats.dropped += 1
            raise

    def _release(self, item: _Item) -> None:
        self.stats.pending_texts -= len(item.texts)
        self.stats.pending_chars -= item.cost

    def _take_batch(self) -> list[_Item]:
        """Whole requests from the front, up to max_batch_texts (at least one request)."""
        batch = [self._queue.popleft()]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= self.max_batch_texts:
            item = self._queue.popleft()
            batch.append(item)
            size += len(item.texts)
        return batch

    async def _encode(self, texts: list[str]) -> Sequence[np.ndarray]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.encode, texts)

    def _measure(self, cost: int, seconds: float) -> None:
        if seconds <= 0:
            return
        rate = cost / seconds
        old = self.stats.chars_per_s
        self.stats.chars_per_s = rate if old == 0 else old + RATE_SMOOTHING * (rate - old)

    async def _run(self) -> None:
        assert self._wakeup is not None
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                if self.max_wait_s:  # idle until now: give concurrent callers a moment
                    await asyncio.sleep(self.max_wait_s)
            if not self._queue:  # every queued request was cancelled meanwhile
                continue
            batch = []
            for item in self._take_batch():
                if item.future.done():  # cancelled: its client went away while queued
                    self._release(item)
                    self.stats.dropped += 1
                else:
                    batch.append(item)
            texts = [text for item in batch for text in item.texts]
            if not texts:
                continue
            tic = time.perf_counter()
            self._running = (sum(item.cost for item in batch), tic)
            try:
                outputs = await self._encode(texts)
            except Exception as err:  # noqa: BLE001 - some request's texts broke the encoder
                if len(batch) == 1:
                    self.stats.failed += 1
                    batch[0].future.set_exception(err)
                else:
                    await self._isolate(batch)
            else:
                self._measure(sum(item.cost for item in batch), time.perf_counter() - tic)
                start = 0
                for item in batch:
                    stop = start + len(item.texts)
                    if not item.future.done():
                        item.future.set_result([array[start:stop] for array in outputs])
                    start = stop
            finally:
                self._running = None
                for item in batch:
                    self._release(item)
            self.stats.batches += 1
            self.stats.texts += len(texts)
            self.stats.largest_batch = max(self.stats.largest_batch, len(texts))

    async def _isolate(self, batch: list[_Item]) -> None:
        """Encode each request of a failed batch alone: only the guilty ones get the error."""
        for item in batch:
            if item.future.done():
                continue
            try:
                outputs = await self._encode(item.texts)
            except Exception as err:  # noqa: BLE001 - handed to that request's caller
                self.stats.failed += 1
                if not item.future.done():
                    item.future.set_exception(err)
            else:
                if not item.future.done():
                    item.future.set_result(list(outputs))
