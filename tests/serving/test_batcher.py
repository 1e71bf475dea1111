"""The token-budgeted batcher: passes packed across requests, served vectors equal to bulk ones,
the serving order (a query goes ahead of queued indexing work, a large request is not starved),
and admission that refuses only what could not finish in time."""

from __future__ import annotations

import asyncio
import socket
import time

import numpy as np
import pytest

pytest.importorskip("fastapi")

from dclr.models.encoder import SentenceEncoder  # noqa: E402
from dclr.serving.batcher import CannotFinishInTime, EmbeddingBatcher, Overloaded  # noqa: E402
from dclr.serving.settings import Batching  # noqa: E402


def char_tokens(texts):
    """A stand-in tokenizer: one token per character, each token id the character's code."""
    return [[ord(c) for c in text] for text in texts]


def text_of(ids):
    return "".join(map(chr, ids))


class Recorder:
    """An encode function that takes `seconds_per_token` per token and records each pass."""

    def __init__(self, seconds_per_token=0.0):
        self.passes: list[list[str]] = []
        self.seconds_per_token = seconds_per_token

    def __call__(self, ids):
        self.passes.append([text_of(x) for x in ids])
        time.sleep(self.seconds_per_token * sum(len(x) for x in ids))
        return (np.array([[len(x), x[0]] for x in ids], dtype=np.float32),)


def run(coroutine_fn):
    return asyncio.run(coroutine_fn())


def run_started(encode, settings, body):
    """`body(batcher)` on a started batcher of `char_tokens` and `encode`, closed afterwards;
    returns the batcher's stats."""

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, settings)
        await batcher.start()
        try:
            await body(batcher)
            return batcher.stats
        finally:
            await batcher.close()

    return asyncio.run(scenario())


REQUESTS = [["a" * 30, "b" * 30], ["c" * 30], ["d" * 30, "e" * 5]]  # 125 tokens


def test_a_pass_takes_texts_across_requests_up_to_the_token_budget():
    encode = Recorder()

    async def scenario():
        batcher = EmbeddingBatcher(
            char_tokens, encode, Batching(max_batch_tokens=100, max_wait=0.01)
        )
        await batcher.start()
        try:
            results = await asyncio.gather(*(batcher.submit(r) for r in REQUESTS))
            return results, batcher.stats
        finally:
            await batcher.close()

    results, stats = run(scenario)
    assert len(encode.passes) == 2  # 125 tokens: two passes of at most 100
    assert all(sum(map(len, p)) <= 100 for p in encode.passes)
    assert sorted(t for p in encode.passes for t in p) == sorted(sum(REQUESTS, []))
    assert max(len({t[0] for t in p}) for p in encode.passes) >= 3  # across requests
    for texts, (vectors, lengths) in zip(REQUESTS, results, strict=True):
        assert lengths.tolist() == [len(t) for t in texts]
        assert vectors[:, 1].tolist() == [ord(t[0]) for t in texts]  # its own rows, in order
    assert stats.tokens == 125 and stats.pending_tokens == 0 and stats.pending_texts == 0


def test_a_large_request_is_split_into_passes_and_reassembled_in_order():
    encode = Recorder()
    texts = [chr(ord("a") + i) * (10 + i) for i in range(20)]  # 390 tokens

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch_tokens=64))
        await batcher.start()
        try:
            return await batcher.submit(texts)
        finally:
            await batcher.close()

    vectors, lengths = run(scenario)
    assert len(encode.passes) > 5 and all(sum(map(len, p)) <= 64 for p in encode.passes)
    assert vectors[:, 1].tolist() == [ord(t[0]) for t in texts]
    assert lengths.tolist() == [len(t) for t in texts]


def test_a_query_goes_ahead_of_queued_indexing_requests():
    """Eight 64-text requests queued, then a one-text query: it is in the next pass, not
    behind all of them (the first-in-first-out batcher served it last)."""
    encode = Recorder(seconds_per_token=2e-5)

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch_tokens=1000))
        await batcher.start()
        try:
            await batcher.submit(["warm" * 10] * 50)  # measures the rate
            indexing = [asyncio.ensure_future(batcher.submit([f"{i}" * 30] * 64)) for i in range(8)]
            while len(encode.passes) < 2:  # the first indexing pass is running (not a fixed
                await asyncio.sleep(0.001)  # sleep: a loaded machine ran several passes in it)
            started = len(encode.passes)  # passes begun before the query came
            query = asyncio.ensure_future(batcher.submit(["query"]))
            await asyncio.sleep(0)
            assert not any(f.done() for f in indexing)  # all eight still queued or running
            await query
            query_pass = next(i for i, p in enumerate(encode.passes) if "query" in p)
            await asyncio.gather(*indexing)
            return query_pass - started, len(encode.passes)
        finally:
            await batcher.close()

    waited, total = run(scenario)
    assert waited <= 1, f"the query waited {waited} passes of {total}"  # 0: the very next pass
    assert total > 10


def test_no_request_is_starved_by_a_stream_of_queries():
    encode = Recorder(seconds_per_token=1e-4)

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch_tokens=200))
        await batcher.start()
        try:
            await batcher.submit(["warm" * 10] * 50)
            big = asyncio.ensure_future(batcher.submit(["x" * 100] * 10))  # ~0.1 s of work
            tic = time.perf_counter()
            while not big.done():
                await batcher.submit(["q" * 20])  # one query after another, for ever
                assert time.perf_counter() - tic < 5, "the large request never finished"
            return await big
        finally:
            await batcher.close()

    vectors, _ = run(scenario)
    assert len(vectors) == 10


def test_served_vectors_equal_bulk_vectors_whatever_the_batch_mates(tiny_model_dir):
    """A text's vector from the service's pass (packed with texts of other lengths, from other
    requests) equals `SentenceEncoder.encode` of that text alone and of the whole list."""
    from dclr.serving.encoding import encoder_functions

    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean")
    assert encoder.enable_packing()
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "a",
        "mat",
        "while",
        "rain",
        "fell",
        "over",
        "quiet",
        "hills",
        "and",
        "rivers",
    ]
    texts = [" ".join(words[: 1 + (7 * i) % len(words)]) for i in range(40)]
    bulk = encoder.encode(texts, normalize=True)
    alone = np.stack([encoder.encode([t], normalize=True)[0] for t in texts[:5]])

    async def scenario():
        batcher = EmbeddingBatcher(*encoder_functions(encoder), Batching(max_batch_tokens=96))
        await batcher.start()
        try:
            chunks = [texts[i : i + 3] for i in range(0, len(texts), 3)]
            return await asyncio.gather(*(batcher.submit(c) for c in chunks)), batcher.stats
        finally:
            await batcher.close()

    results, stats = run(scenario)
    served = np.concatenate([vectors for vectors, _ in results])
    assert stats.batches > 2 and stats.largest_batch > 3  # passes mixed several requests
    assert stats.busy_s > 0  # the model's busy seconds, for /health
    np.testing.assert_allclose(served, bulk, rtol=0, atol=1e-6)
    np.testing.assert_allclose(served[:5], alone, rtol=0, atol=1e-6)


def test_small_passes_run_on_one_thread_and_larger_ones_on_all(tiny_model_dir, monkeypatch):
    """Issue 35: a query's pass (a few texts) runs the model on one intra-op thread, so the
    second core stays with the event loop; a pass of the CPU kind's threshold (`one_thread_below_tokens`) or more
    gets every thread the process was given. The vectors do not depend on it."""
    import torch

    from dclr.serving import encoding
    from dclr.serving.encoding import encoder_functions

    encoder = SentenceEncoder.from_pretrained(tiny_model_dir, pooler="mean")
    seen: list[tuple[int, int]] = []
    real = encoder.encode_ids_poolers

    def spy(ids, *args, **kwargs):
        seen.append((sum(map(len, ids)), torch.get_num_threads()))
        return real(ids, *args, **kwargs)

    monkeypatch.setattr(encoder, "encode_ids_poolers", spy)
    monkeypatch.setattr(encoding, "one_thread_below_tokens", lambda: 128)  # whatever this CPU's
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        tokenize, encode = encoder_functions(encoder)
        one = tokenize(["the cat sat on a mat"])
        many = one * (128 // len(one[0]) + 1)
        small = encode(one)[0]
        encode(many)
        again = encode(one)[0]
    finally:
        torch.set_num_threads(before)
    assert [threads for _, threads in seen] == [1, 2, 1]
    assert seen[0][0] < 128 <= seen[1][0]
    np.testing.assert_array_equal(small, again)


def test_indexing_traffic_a_quiet_machine_finishes_in_time_is_never_refused():
    """Issue 35: 8 clients x 64 texts were refused (503) by a character estimate at the padded
    rate, though the machine finished them in 4-6 s. In tokens at the live rate all are in."""
    encode = Recorder(seconds_per_token=1e-5)  # 8 x 64 x 40 tokens: ~0.2 s of work

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_queue_wait=2.0))
        await batcher.start()
        try:
            await batcher.submit(["warm" * 10] * 50)
            results = await asyncio.gather(
                *(batcher.submit([f"{i}" * 40] * 64) for i in range(8)), return_exceptions=True
            )
            return results, batcher.stats
        finally:
            await batcher.close()

    results, stats = run(scenario)
    assert not [r for r in results if isinstance(r, Exception)] and stats.refused == 0


def test_a_newcomer_that_would_make_admitted_requests_late_is_refused():
    encode = Recorder(seconds_per_token=1e-3)  # 1,000 tokens/s

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch_tokens=100))
        await batcher.start()
        try:
            await batcher.submit(["w" * 50])  # measures ~1,000 tokens/s
            # 600 tokens, ~0.6 s, promised within 1 s: admitted
            admitted = asyncio.ensure_future(batcher.submit(["a" * 100] * 6, deadline_s=1.0))
            await asyncio.sleep(0)
            # a query of 500 tokens would go first (smaller key) and push it to ~1.1 s
            with pytest.raises(Overloaded, match="miss their own deadlines"):
                await batcher.submit(["q" * 100] * 5, deadline_s=5.0)
            await batcher.submit(["q" * 20], deadline_s=5.0)  # a small one still fits
            await admitted
            return batcher.stats
        finally:
            await batcher.close()

    stats = run(scenario)
    assert stats.refused == 1 and stats.late == 0


def test_a_request_that_alone_cannot_finish_in_time_is_refused_at_once_with_413():
    """Issue 47 point 1: on an idle server a 73-s request without a timeout header was admitted
    against the 10-s bound, and every short request sent while it ran got 503. Alone on an idle
    server, a request that cannot meet its deadline is refused at once, saying no retry helps;
    with a timeout long enough (the client's word) the same request is admitted."""
    encode = Recorder(seconds_per_token=1e-3)  # 1,000 tokens/s

    async def scenario(batcher):
        await batcher.submit(["w" * 50])  # measures ~1,000 tokens/s
        passes = len(encode.passes)
        with pytest.raises(CannotFinishInTime, match="cannot succeed.*fewer or shorter"):
            await batcher.submit(["a" * 100] * 10)  # ~1 s of work against 0.5 s
        assert len(encode.passes) == passes  # refused before any work
        await batcher.submit(["a" * 100] * 10, deadline_s=5.0)  # the client waits: fine

    stats = run_started(encode, Batching(max_batch_tokens=100, max_queue_wait=0.5), scenario)
    assert stats.refused == 1


def test_on_a_busy_server_a_request_that_could_never_fit_gets_413_not_a_retry():
    """Issue 47 points 1 and 6: on a busy server, a request that alone at the best measured
    throughput would outlast its bound was told "retry in 1 s" (503), a retry that can never
    succeed. It gets 413 at once; one that fits alone but not now still gets 503 with a retry,
    and one whose client waits long enough (its timeout) is not told "never"."""
    encode = Recorder(seconds_per_token=1e-3)  # 1,000 tokens/s

    async def scenario(batcher):
        await batcher.submit(["w" * 50] * 3)  # measures ~1,000 tokens/s
        # ~0.4 s of work, due within 0.6 s: nothing of 0.3 s fits before or after it
        busy = asyncio.ensure_future(batcher.submit(["b" * 100] * 4, deadline_s=0.6))
        await asyncio.sleep(0.05)
        with pytest.raises(CannotFinishInTime, match="best throughput.*cannot succeed"):
            await batcher.submit(["a" * 100] * 10)  # ~1 s alone, bound 0.5 s: never
        with pytest.raises(Overloaded, match="retry in"):  # fits alone (~0.3 s), not now
            await batcher.submit(["c" * 100] * 3)
        with pytest.raises(Overloaded, match="retry in"):  # its client waits 5 s: later
            await batcher.submit(["a" * 100] * 10, deadline_s=5.0)
        await busy

    stats = run_started(encode, Batching(max_batch_tokens=100, max_queue_wait=0.5), scenario)
    assert stats.refused == 3


def test_a_request_already_late_is_never_charged_to_newcomers():
    """Issue 47 point 1: a request that became late (the machine slowed after it was admitted)
    made every newcomer a 503 ("the requests already queued would miss their own deadlines")
    for as long as it ran. Short requests are admitted and served while it runs."""
    encode = Recorder(seconds_per_token=1e-4)  # 10,000 tokens/s while measured

    async def scenario():
        batcher = EmbeddingBatcher(
            char_tokens, encode, Batching(max_batch_tokens=100, max_queue_wait=1.0)
        )
        await batcher.start()
        try:
            await batcher.submit(["w" * 50] * 4)  # measures the fast rate
            big = asyncio.ensure_future(batcher.submit(["b" * 100] * 40))  # ~0.4 s: admitted
            await asyncio.sleep(0.05)
            encode.seconds_per_token = 1e-3  # the machine slows 10x: big is now late (~4 s)
            await asyncio.sleep(0.3)
            served = []
            for _ in range(5):  # one short query at a time while big runs
                await batcher.submit(["q" * 10], deadline_s=5.0)
                served.append(big.done())
            await big
            return served, batcher.stats
        finally:
            await batcher.close()

    served, stats = run(scenario)
    assert stats.refused == 0
    assert not all(served)  # they were served while the late request was still running


def test_a_flood_after_one_huge_request_is_answered_in_time_or_refused():
    """Issue 39 item 1: after one request of long texts, the character rate rose 11x and the
    queue admitted a flood it could not finish before the clients' timeouts. In tokens (after
    truncation, the model's real work) every admitted request finishes in time."""
    limit = 64  # tokens per text after truncation

    def tokenize(texts):
        return [[ord(c) for c in text[:limit]] for text in texts]

    encode = Recorder(seconds_per_token=2e-5)  # 50,000 tokens/s

    async def scenario():
        batcher = EmbeddingBatcher(tokenize, encode, Batching(max_batch_tokens=2048))
        await batcher.start()
        try:
            await batcher.submit(["h" * 8192] * 256)  # 16k tokens after truncation
            flood = [
                asyncio.ensure_future(batcher.submit(["f" * 60] * 32, deadline_s=0.5))
                for _ in range(40)
            ]  # 77k tokens, ~1.5 s of work: about a third fits in 0.5 s
            results = await asyncio.gather(*flood, return_exceptions=True)
            return results, batcher.stats
        finally:
            await batcher.close()

    results, stats = run(scenario)
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert refused and len(refused) < len(results)
    assert all(not isinstance(r, Exception) or isinstance(r, Overloaded) for r in results)
    assert stats.late == 0


def test_the_listening_socket_turns_nagle_off_on_accepted_connections():
    """Issue 35: with proto 0, asyncio left Nagle on for accepted sockets, and each small response
    waited ~40 ms for the client's delayed ACK. Read TCP_NODELAY on a socket the server accepted,
    through the same loop.create_server(sock=...) call uvicorn makes."""
    from dclr.serving.server import bind

    async def scenario():
        sock = bind("127.0.0.1", 0)
        seen = []

        class Probe(asyncio.Protocol):
            def connection_made(self, transport):
                accepted = transport.get_extra_info("socket")
                seen.append(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        writer.close()
        server.close()
        return seen

    seen = run(scenario)
    assert seen and seen[0] != 0


def test_the_protocol_sets_nodelay_on_sockets_it_did_not_bind():
    from dclr.serving.protocols import set_nodelay

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # proto 0, as before the fix
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()

    class Transport:
        def get_extra_info(self, name):
            return accepted if name == "socket" else None

    try:
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        set_nodelay(Transport())
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for s in (client, accepted, listener):
            s.close()


# ---- several workers ----------------------------------------------------------------------------
def test_two_workers_encode_two_passes_at_once_and_split_a_lone_request():
    """With two workers the budget is shared (each pass half of it), a lone request is spread
    over both idle workers, and the two passes really run at the same time: each waits at a
    barrier that only opens when both are inside `encode`."""
    import threading

    barrier = threading.Barrier(2, timeout=5)
    passes: list[list[str]] = []

    def encode(ids):
        passes.append([text_of(x) for x in ids])
        barrier.wait()  # BrokenBarrierError (the request fails) if the passes ran one by one
        return (np.array([[len(x), x[0]] for x in ids], dtype=np.float32),)

    async def scenario():
        batcher = EmbeddingBatcher(
            char_tokens, encode, Batching(max_batch_tokens=200, encode_workers=2)
        )
        await batcher.start()
        try:
            texts = [c * 20 for c in "abcdefgh"]  # 160 tokens: one pass of one worker's 100
            return await batcher.submit(texts), batcher.stats, batcher.pass_tokens
        finally:
            await batcher.close()

    (vectors, lengths), stats, pass_tokens = run(scenario)
    assert pass_tokens == 100 and stats.batches == 2
    assert sorted(len(p) for p in passes) == [4, 4]  # 80 tokens each: the queue per idle worker
    assert [chr(int(v[1])) for v in vectors] == list("abcdefgh")  # rows back in request order
    assert lengths.tolist() == [20] * 8


def test_the_queue_drains_twice_as_fast_with_two_workers():
    """The admission estimate runs as many passes at once as there are workers."""

    async def estimate(workers):
        batcher = EmbeddingBatcher(
            char_tokens, Recorder(), Batching(max_batch_tokens=200, encode_workers=workers)
        )
        for _ in range(4):  # a cost model: 0.01 s per pass, 1 ms per token, per worker
            batcher._measure(10, 0.02)
            batcher._measure(100, 0.11)
        batcher.stats.pending_tokens = 400
        return batcher.estimated_wait_s()

    one, two = run(lambda: estimate(1)), run(lambda: estimate(2))
    assert one == pytest.approx(2 * 0.01 + 0.4)  # two passes of 200 tokens, one after another
    assert two == pytest.approx((4 * 0.01 + 0.4) / 2)  # four passes of 100, two at a time
