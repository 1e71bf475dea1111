"""Dynamic batching by tokens: texts from concurrent requests share packed forward passes.

A request's texts are tokenised on arrival, so the queue knows its work in tokens. Each of
`encode_workers` workers (one by default) repeatedly takes queued texts up to its token budget (an
equal share of `max_batch_tokens`, not an item count), across requests, and runs the encode
function once on its own executor thread (the model's intra-op threads do the parallel work);
the encode function orders them by length and encodes them packed, as bulk encoding does, and
each request gets its rows when its last text is done, whichever pass encoded them. While
passes run, new requests queue up, so under load passes fill by themselves; `max_wait` only
matters when the server is idle. A worker that finds other workers idle takes only its share
of the queue, so a lone large request is spread over them.

Order: queued requests are served by a fair-queue key, arrival time plus the time the request
alone would take at the live rate (its "virtual finish"): a one-text query that arrives while
64-text indexing requests wait goes ahead of those that came less than their own encoding time
before it, so it waits for about one forward pass, not for the whole queue; a large request is
split across passes and is never starved (every later arrival's key grows with the clock).

Admission (HTTP 503 with Retry-After, at once): every admitted request has a deadline,
`max_queue_wait`, or the client's own timeout when it says a shorter one (`X-Request-Timeout`,
OpenAI's `x-stainless-timeout`); keeping the server's bound under typical client timeouts (10 s
against 30-60 s) leaves room for the machine to slow down after admission (another job takes
the cores) without a client timing out. A new request is admitted only if, with it in the queue
in serving order, every queued request still finishes before its deadline: it is not refused for
work the machine can finish in time, and it cannot break a promise already made; a request
that is already late (slower than estimated) is not a promise a newcomer can break, so it never
makes newcomers wait or fail. A request that alone, on an idle server, could not finish within
its deadline (the client's stated timeout, else `max_queue_wait`) is refused at once with HTTP 413
(`CannotFinishInTime`): retrying it cannot help; fewer texts or a longer timeout can. Times come from a cost model of a pass, a fixed cost plus a
cost per token, fitted on recent passes of every size (`PASSES_PER_SIZE`), with as many passes
at once as there are workers, and raised at once when a running pass overruns it (another job
took the cores); one request cannot inflate it,
since a text's cost is its token count after truncation, the work the model really does. Hard
bounds on queued texts and tokens cap memory whatever the model says.

A request whose client went away (its awaiting task is cancelled) leaves the queue at once and
its texts not yet encoded never are. One bad request fails only itself: when a pass's encode
raises, each request in it is encoded again alone, so the others get their vectors and the one
that fails gets its own error.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from dclr.serving.settings import Batching

# The cost model is fitted on the latest PASSES_PER_SIZE passes of each size class (tokens in
# powers of 4: 1-3, 4-15, ..., 1024-4095), so a stream of one-text queries does not erase what
# large passes showed about the per-token cost (a fit on one narrow size range extrapolates
# badly) ...
PASSES_PER_SIZE = 8
# ... measured in the last RATE_MEMORY_S seconds (older passes describe another machine state;
# a slowdown shows at once through the running pass, see `_costs`).
RATE_MEMORY_S = 300.0
# Before the first pass is measured: a conservative tokens/s (MiniLM packed on 2 CPU threads
# runs ~3,500), used only to order requests, never to refuse one.
INITIAL_TOKENS_PER_S = 1000.0
# Retry-After bounds in seconds: at least one, at most the queue-wait bound.
MIN_RETRY_AFTER_S = 1

# token ids of n texts -> a sequence of arrays whose first axis is n (e.g. vectors (n, d))
EncodeIds = Callable[[list[list[int]]], Sequence[np.ndarray]]
Tokenize = Callable[[list[str]], list[list[int]]]


class Overloaded(Exception):
    """The queue cannot take the request: retry after `retry_after` seconds (HTTP 503)."""

    def __init__(self, message: str, retry_after: int = MIN_RETRY_AFTER_S) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class CannotFinishInTime(Exception):
    """The request alone, on an idle server, would outlast its deadline: no retry of the same
    request can succeed (HTTP 413); fewer or shorter texts, or a longer timeout, can."""


@dataclass
class BatcherStats:
    """Counters exposed by /health: how much batching happened."""

    requests: int = 0
    batches: int = 0
    texts: int = 0
    tokens: int = 0
    largest_batch: int = 0  # texts in one forward pass
    pending_texts: int = 0
    pending_tokens: int = 0
    refused: int = 0
    dropped: int = 0  # requests whose client went away before their texts were encoded
    failed: int = 0  # requests whose own texts made the encoder fail
    late: int = 0  # requests answered after their deadline (the rate estimate was wrong)
    tokens_per_s: float = 0.0  # measured throughput of a full pass (0: not measured yet)
    busy_s: float = 0.0  # worker-seconds spent in passes (busy / uptime / workers: the load)


@dataclass(eq=False)
class _Request:
    ids: list[list[int]]
    lengths: np.ndarray  # (n,) tokens per text
    key: float  # serving order (smaller first)
    deadline: float  # perf_counter time it must be answered by
    future: asyncio.Future = field(repr=False)
    taken: int = 0  # texts handed to passes so far
    done: int = 0  # texts encoded so far
    outputs: list[np.ndarray] | None = None
    # seconds it may take on an idle server (the client's timeout, else max_queue_wait): a
    # request that would outlast it even then can never be served as it is
    patience: float = math.inf
    patience_of: str = "max_queue_wait_s"  # whose bound the patience is

    @property
    def remaining_tokens(self) -> int:
        return int(self.lengths[self.taken :].sum())


class EmbeddingBatcher:
    """Collects texts from concurrent `submit` calls into token-budgeted passes of `encode`.

    tokenize: n texts -> n token-id lists (truncated where the model truncates), called on
    arrival; encode: n token-id lists -> a sequence of arrays whose first axis is n (e.g. unit
    vectors (n, d)); each caller receives its own rows of every array and its token counts.
    """

    def __init__(
        self,
        tokenize: Tokenize,
        encode: EncodeIds,
        settings: Batching | None = None,
    ) -> None:
        settings = settings or Batching()
        self.tokenize = tokenize
        self.encode = encode
        self.settings = settings
        self.workers = settings.encode_workers or 1
        # the budget is shared by the passes run at once: memory in flight stays that of one
        self.pass_tokens = max(1, settings.max_batch_tokens // self.workers)
        self.stats = BatcherStats()
        self._queue: list[_Request] = []  # sorted by key
        # size class -> its latest passes (tokens, seconds, when measured)
        self._passes: dict[int, collections.deque[tuple[int, float, float]]] = {}
        # (when its oldest pass was measured, the fit) until a pass is measured or that expires
        self._fitted: tuple[float, tuple[float, float]] | None = None
        # the fastest fit ever measured (by a full pass's cost): what "never in time" is judged by
        self._best_fit: tuple[float, float] | None = None
        self._wakeup: asyncio.Event | None = None
        self._workers: list[asyncio.Task] = []
        self._executor = ThreadPoolExecutor(
            max_workers=self.workers, thread_name_prefix="dclr-encode"
        )
        self._running: dict[int, tuple[int, float]] = {}  # worker -> (tokens, start) of its pass

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The model threads, one per worker (other model work, e.g. search, can share them)."""
        return self._executor

    async def start(self, warm_up: list[str] | None = None) -> None:
        """Start the worker; `warm_up` texts are encoded first, unmeasured (a model's first
        forward passes pay one-time costs that would make the first estimates far too slow)."""
        if warm_up:
            loop = asyncio.get_running_loop()
            ids = self.tokenize(warm_up)
            for _ in range(2):
                await loop.run_in_executor(self._executor, self.encode, ids)
            # then seed the cost model with a one-text pass and a pass of ~half the budget
            large = ids * max(1, self.pass_tokens // 2 // sum(map(len, ids)))
            for seed in ([ids[0]], [ids[0]], large):
                tic = time.perf_counter()
                await loop.run_in_executor(self._executor, self.encode, seed)
                self._measure(sum(map(len, seed)), time.perf_counter() - tic)
        self._wakeup = asyncio.Event()
        self._workers = [asyncio.create_task(self._run(i), name=f"dclr-batcher-{i}")
                         for i in range(self.workers)]  # fmt: skip

    async def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        for worker in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await worker
        for request in self._queue:
            if not request.future.done():
                request.future.set_exception(Overloaded("the server is shutting down"))
        self._queue.clear()
        self._executor.shutdown(wait=True)

    # ---- the cost model and the admission test ----------------------------------------------
    def _fit(self) -> tuple[float, float] | None:
        """(seconds per pass, seconds per token) fitted by least squares on the recent passes,
        or None before any pass. A forward pass has a fixed cost (a one-text pass of MiniLM is
        ~12 ms for ~13 tokens, 7x the per-token cost of a full pass), so a rate in tokens/s alone
        would take a stream of single queries for a slow machine. With too little spread in the
        pass sizes to separate the two, all of the time is put on the tokens (conservative for
        larger passes). Computed once per measured pass (and again when its oldest pass
        expires), not on every admission."""
        now = time.perf_counter()
        if self._fitted is not None and now - self._fitted[0] < RATE_MEMORY_S:
            return self._fitted[1]
        recent = [p for size in self._passes.values() for p in size if now - p[2] < RATE_MEMORY_S]
        if not recent:
            self._fitted = None
            return None
        fit = self._fit_window([(tokens, seconds) for tokens, seconds, _ in recent])
        self._fitted = (min(when for _, _, when in recent), fit)
        return fit

    @staticmethod
    def _fit_window(window: list[tuple[int, float]]) -> tuple[float, float]:
        """(seconds per pass, seconds per token) by least squares on (tokens, seconds) pairs."""
        n = len(window)
        total_t, total_s = sum(t for t, _ in window), sum(s for _, s in window)
        mean_t, mean_s = total_t / n, total_s / n
        var = sum((t - mean_t) ** 2 for t, _ in window)
        if n >= 3 and var > 0:
            per_token = sum((t - mean_t) * (s - mean_s) for t, s in window) / var
            per_pass = mean_s - per_token * mean_t
            if per_token > 0 and 0 <= per_pass <= min(s for _, s in window):
                return per_pass, per_token
        return 0.0, total_s / total_t

    def _costs(self) -> tuple[float, float] | None:
        """The fit, with the per-token cost raised at once when the pass running has already
        taken longer than the fit allows (the machine got slower: another job took its cores)."""
        fit = self._fit()
        if fit is None:
            return None
        per_pass, per_token = fit
        now = time.perf_counter()
        for tokens, tic in self._running.values():
            elapsed = now - tic
            if elapsed > per_pass + per_token * tokens:
                per_token = max(per_token, (elapsed - per_pass) / tokens)
        return per_pass, per_token

    def live_rate(self) -> float:
        """Tokens per second of full passes on every worker now (see `_costs`); 0: not measured
        yet."""
        costs = self._costs()
        if costs is None:
            return 0.0
        per_pass, per_token = costs
        return self.workers * self.pass_tokens / (per_pass + per_token * self.pass_tokens)

    def _drain_s(self, tokens: int, costs: tuple[float, float]) -> float:
        """Seconds that passes of `tokens` queued tokens take (full passes of the budget, as
        many at once as there are workers)."""
        passes = -(-tokens // self.pass_tokens)  # ceil
        return (passes * costs[0] + tokens * costs[1]) / self.workers

    def estimated_wait_s(self, extra_tokens: int = 0) -> float | None:
        """Seconds to drain the queue (plus `extra_tokens`); None: unknown."""
        costs = self._costs()
        if costs is None:
            return None
        return self._running_left_s(costs) + self._drain_s(
            self.stats.pending_tokens + extra_tokens, costs
        )

    def _running_left_s(self, costs: tuple[float, float]) -> float:
        """Seconds until a worker is free for queued work: 0 while one is idle, else what the
        fit leaves of the soonest-ending running pass (a pass that has overrun the fit counts
        as long again as it has run: it is slower than any estimate)."""
        if len(self._running) < self.workers:
            return 0.0
        now = time.perf_counter()
        per_pass, per_token = self._fit() or costs
        left = []
        for tokens, tic in self._running.values():
            elapsed, expected = now - tic, per_pass + per_token * tokens
            left.append(expected - elapsed if elapsed < expected else elapsed)
        return min(left)

    def _late(
        self, queue: list[_Request], now: float, costs: tuple[float, float]
    ) -> dict[int, float]:
        """The requests of `queue` (in serving order) that would finish after their deadlines:
        {id(request): estimated finish in seconds from now}; empty when all are in time."""
        running = self._running_left_s(costs)
        cumulative = 0
        late = {}
        for request in queue:
            cumulative += request.remaining_tokens
            finish = running + self._drain_s(cumulative, costs)
            if now + finish > request.deadline:
                late[id(request)] = finish
        return late

    def _measure(self, tokens: int, seconds: float) -> None:
        if seconds <= 0:
            return
        size = int(math.log(max(tokens, 1), 4))
        passes = self._passes.setdefault(size, collections.deque(maxlen=PASSES_PER_SIZE))
        self._fitted = None  # refit on the next estimate
        passes.append((tokens, seconds, time.perf_counter()))
        self.stats.tokens_per_s = round(self.live_rate(), 1)
        fit = self._fit()
        if fit is not None and (
            self._best_fit is None or self._pass_s(fit) < self._pass_s(self._best_fit)
        ):
            self._best_fit = fit

    def _pass_s(self, costs: tuple[float, float]) -> float:
        """Seconds of one full pass of the budget under `costs`."""
        return costs[0] + costs[1] * self.pass_tokens

    def _refuse(self, reason: str, wait_s: float | None) -> Overloaded:
        self.stats.refused += 1
        wait = wait_s if wait_s is not None else self.estimated_wait_s() or MIN_RETRY_AFTER_S
        ceiling = math.ceil(self.settings.max_queue_wait)
        retry = max(MIN_RETRY_AFTER_S, min(math.ceil(wait), ceiling))
        return Overloaded(f"{reason}; retry in {retry} s", retry)

    def _admit(self, request: _Request, bound: float, whose: str) -> None:
        """Queue `request` or raise Overloaded (see the module docstring)."""
        stats, n, tokens = self.stats, len(request.ids), int(request.lengths.sum())
        if stats.pending_texts and stats.pending_texts + n > self.settings.max_pending:
            raise self._refuse(
                f"{stats.pending_texts} texts are already waiting (limit {self.settings.max_pending})",
                None,
            )
        if (
            stats.pending_tokens
            and stats.pending_tokens + tokens > self.settings.max_pending_tokens
        ):
            raise self._refuse(
                f"{stats.pending_tokens} tokens of text are already waiting (limit "
                f"{self.settings.max_pending_tokens})",
                None,
            )
        costs = self._costs()
        now = time.perf_counter()
        already = {} if costs is None else self._late(self._queue, now, costs)
        at = bisect.bisect_right(self._queue, request.key, key=lambda r: r.key)
        first_late = next((r for r in self._queue[:at] if id(r) in already), None)
        if first_late is not None:  # a late request's delay is not the newcomer's to pay:
            request.key = first_late.key  # it goes ahead of it (it still gets every pass's rest)
            at = bisect.bisect_left(self._queue, request.key, key=lambda r: r.key)
        queue = [*self._queue[:at], request, *self._queue[at:]]  # the queue stays sorted
        if costs is not None:
            self._check_deadlines(request, queue, bound, whose, costs, already)
        self._queue = queue
        stats.pending_texts += n
        stats.pending_tokens += tokens
        stats.requests += 1

    def _check_deadlines(
        self,
        request: _Request,
        queue: list[_Request],
        bound: float,
        whose: str,
        costs: tuple[float, float],
        already: dict[int, float],
    ) -> None:
        """Refuse `request` if it would miss its own deadline, or make a queued request miss one
        it would otherwise meet. A request already late (admitted with a long timeout, or slower
        than estimated) is never charged to a newcomer: before issue 47 one late request made
        every later one a 503 for as long as it ran. `already`: the queue's late requests before
        `request` came (`_admit` put `request` ahead of them)."""
        late = self._late(queue, time.perf_counter(), costs)
        if id(request) in late:
            never = self._never_in_time(request, late[id(request)])
            if never is not None:
                seconds, at = never
                self.stats.refused += 1
                raise CannotFinishInTime(
                    f"this request alone would take ~{seconds:.1f} s {at}, "
                    f"over its limit of {request.patience:g} s ({request.patience_of}); retrying "
                    "it as it is cannot succeed: send fewer or shorter texts per request, or a "
                    "longer timeout (x-stainless-timeout header)"
                )
            raise self._refuse(
                f"the queue would take ~{late[id(request)]:.1f} s to finish this request at the "
                f"current throughput (limit {bound:g} s, {whose})",
                self.estimated_wait_s(),
            )
        if any(key not in already for key in late):
            raise self._refuse(
                "the requests already queued would miss their own deadlines if this one "
                "went ahead of them",
                self.estimated_wait_s(),
            )

    def _never_in_time(self, request: _Request, estimate: float) -> tuple[float, str] | None:
        """(seconds `request` would take alone, at which throughput) when no retry can bring it
        in under its patience, else None. On an idle server: the estimate at the current
        throughput. On a busy one: alone, at the best throughput ever measured (issue 47: a
        request that could never fit was told to retry in 1 s; the current rate cannot promise
        "never" under a passing outside load)."""
        if not self._queue and not self._running:
            return estimate, "at the current throughput"
        if self._best_fit is None:
            return None
        alone = self._drain_s(request.remaining_tokens, self._best_fit)
        if alone <= request.patience:
            return None
        return alone, "even at the best throughput this server has measured"

    async def submit(self, texts: list[str], deadline_s: float | None = None) -> list[np.ndarray]:
        """Encode `texts` with whatever else is queued; returns this request's rows of every
        array `encode` returns, then its token counts (n,).

        Raises Overloaded when the queue cannot take the request (including when it would not
        be done within `deadline_s`, the client's own timeout, when it says one), and the
        encoder's error when these texts (alone) cannot be encoded. Cancelling the awaiting task
        removes the request from the queue.
        """
        if self._wakeup is None:
            raise RuntimeError("EmbeddingBatcher.start() was not awaited")
        ids = self.tokenize(texts)
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))  # (n,)
        bound, whose = self.settings.max_queue_wait, "max_queue_wait_s"
        idle = not self._queue and not self._running
        if deadline_s is not None and (deadline_s < bound or idle):  # idle: the client's word
            bound, whose = deadline_s, "your timeout"
        now = time.perf_counter()
        rate = self.live_rate() or INITIAL_TOKENS_PER_S
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        request = _Request(ids, lengths, now + lengths.sum() / rate, now + bound, future)
        if deadline_s is None:
            request.patience = self.settings.max_queue_wait
        else:
            request.patience, request.patience_of = deadline_s, "your timeout"
        self._admit(request, bound, whose)
        self._wakeup.set()
        try:
            return await future
        except asyncio.CancelledError:
            if request in self._queue:  # still waiting: drop it now, not when its turn comes
                self._remove(request)
                self.stats.dropped += 1
            raise

    def _remove(self, request: _Request) -> None:
        """Take `request` out of the queue, releasing what it had not handed to a pass."""
        self._queue.remove(request)
        self.stats.pending_texts -= len(request.ids) - request.taken
        self.stats.pending_tokens -= request.remaining_tokens

    # ---- forming and running passes ----------------------------------------------------------
    def _take_pass(self) -> list[tuple[_Request, int, int]]:
        """(request, first text, end) slices in serving order, up to the token budget (at
        least one text); taken texts leave the pending counts. With idle workers besides this
        one, the budget is the queue's share per idle worker, so that a lone large request is
        spread over them instead of running on one."""
        slices: list[tuple[_Request, int, int]] = []
        tokens = texts = 0
        idle = self.workers - len(self._running)  # this worker included
        budget = min(self.pass_tokens, -(-self.stats.pending_tokens // max(idle, 1)))
        for request in list(self._queue):
            start = stop = request.taken
            while stop < len(request.ids) and texts < self.settings.max_batch:
                size = int(request.lengths[stop])
                if texts and tokens + size > budget:
                    break
                tokens += size
                texts += 1
                stop += 1
            if stop > start:
                slices.append((request, start, stop))
                request.taken = stop
                self.stats.pending_texts -= stop - start
                self.stats.pending_tokens -= int(request.lengths[start:stop].sum())
                if stop == len(request.ids):
                    self._queue.remove(request)  # all its texts are in passes now
            if stop < len(request.ids):
                break  # the budget is full
        return slices

    async def _encode(self, ids: list[list[int]]) -> Sequence[np.ndarray]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self.encode, ids)

    def _deliver(self, request: _Request, start: int, outputs: Sequence[np.ndarray]) -> None:
        """Rows start.. of `request` are encoded: store them; answer when all are."""
        if request.future.done():
            return
        n = len(request.ids)
        if request.outputs is None:
            request.outputs = [np.empty((n, *a.shape[1:]), dtype=a.dtype) for a in outputs]
        stop = start + len(outputs[0])
        for buffer, array in zip(request.outputs, outputs, strict=True):
            buffer[start:stop] = array
        request.done += stop - start
        if request.done == n:
            if time.perf_counter() > request.deadline:
                self.stats.late += 1
            request.future.set_result([*request.outputs, request.lengths])

    def _fail(self, request: _Request, err: Exception) -> None:
        self.stats.failed += 1
        if request in self._queue:
            self._remove(request)
        if not request.future.done():
            request.future.set_exception(err)

    async def _run(self, worker: int) -> None:
        assert self._wakeup is not None
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                await asyncio.sleep(self.settings.max_wait)  # idle until now: let company join
            if not self._queue:  # every queued request was cancelled meanwhile
                continue
            slices = [s for s in self._take_pass() if not s[0].future.done()]
            ids = [x for request, start, stop in slices for x in request.ids[start:stop]]
            if not ids:
                continue
            tokens = sum(len(x) for x in ids)
            tic = time.perf_counter()
            self._running[worker] = (tokens, tic)
            try:
                outputs = await self._encode(ids)
            except Exception as err:  # noqa: BLE001 - some request's texts broke the encoder
                if len(slices) == 1:
                    self._fail(slices[0][0], err)
                else:
                    await self._isolate(slices)
            else:
                seconds = time.perf_counter() - tic
                self._measure(tokens, seconds)
                self.stats.busy_s += seconds
                offset = 0
                for request, start, stop in slices:
                    count = stop - start
                    rows = [array[offset : offset + count] for array in outputs]
                    self._deliver(request, start, rows)
                    offset += count
            finally:
                del self._running[worker]
            stats = self.stats
            stats.batches += 1
            stats.texts += len(ids)
            stats.tokens += tokens
            stats.largest_batch = max(stats.largest_batch, len(ids))

    async def _isolate(self, slices: list[tuple[_Request, int, int]]) -> None:
        """Encode each request's slice of a failed pass alone: only the guilty ones fail."""
        for request, start, stop in slices:
            if request.future.done():
                continue
            try:
                outputs = await self._encode(request.ids[start:stop])
            except Exception as err:  # noqa: BLE001 - handed to that request's caller
                self._fail(request, err)
            else:
                self._deliver(request, start, list(outputs))
