"""Fault injection against the HTTP service: poison requests, slow clients, floods, strangers.

Each case is a defect found by probing the service (issue 13): one bad request failed its whole
batch with a plain-text 500; connections that never finish their headers blocked every new request;
the queue bound counted texts, not their length, and work for departed clients was still done; any
Host header and any caller were accepted.
"""

import asyncio
import json
import socket
import time

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")

from typer.testing import CliRunner  # noqa: E402

from dclr.cli.main import app as cli_app  # noqa: E402
from dclr.models.encoder import SentenceEncoder  # noqa: E402
from dclr.serving.batcher import EmbeddingBatcher, Overloaded  # noqa: E402
from dclr.serving.launch import serve_process  # noqa: E402
from dclr.serving.middleware import BodyLimitMiddleware  # noqa: E402
from dclr.serving.protocols import available_parsers  # noqa: E402
from dclr.serving.service import create_app  # noqa: E402
from dclr.serving.settings import Batching, Connections  # noqa: E402

API_KEY = "test-key-0123456789"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
HEADER_TIMEOUT_S = 2.0
# More half-open connections than the old server's connection limit (128).
SLOW_CONNECTIONS = 130


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):  # conftest: built once per session
    return tiny_model_dir


# Every HTTP parser `dclr serve --http` offers here (httptools first when installed): the guards
# hold for each.
PARSERS = available_parsers()


@pytest.fixture(scope="module", params=PARSERS)
def server(model_dir, request):
    args = [str(model_dir), "--pooler", "mean", "--header-timeout", str(HEADER_TIMEOUT_S),
            "--http", request.param]  # fmt: skip
    with serve_process(args, env={"DCLR_API_KEY": API_KEY}) as proc:
        yield proc


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30, headers=AUTH) as c:
        yield c


def escaped(payload):
    """JSON with non-ASCII as \\u escapes, as a browser or another client may send a lone
    surrogate (httpx's own json= cannot: it encodes UTF-8 first)."""
    return {"content": json.dumps(payload), "headers": {"content-type": "application/json"}}


def _error(response, status):
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"] == "application/json"
    return response.json()["error"]


# ---- one bad request fails only itself ---------------------------------------------------------
def test_lone_surrogate_is_a_400_naming_the_field(client):
    error = _error(client.post("/v1/embeddings", **escaped({"input": ["fine", "\ud800 x"]})), 400)
    assert error["code"] == "invalid_unicode" and error["param"] == "input[1]"
    assert "U+D800" in error["message"]
    error = _error(client.post("/similarity", **escaped({"pairs": [["a", "b \udfff"]]})), 400)
    assert error["code"] == "invalid_unicode" and error["param"] == "pairs[0][1]"


class PoisonEncoder(SentenceEncoder):
    """Raises whenever a pass holds the token ids of POISON_TEXT (as an encoder might on an
    input it cannot handle), wherever it sits in the pass."""

    def encode_ids_poolers(self, ids, *args, **kwargs):
        poison = self.tokenizer(POISON_TEXT)["input_ids"]
        if any(list(x) == poison for x in ids):
            raise TypeError("TextEncodeInput must be Union[TextInputSequence, ...]")
        return super().encode_ids_poolers(ids, *args, **kwargs)


POISON_TEXT = "POISON here"


def test_poison_request_fails_only_itself(model_dir):
    encoder = SentenceEncoder.from_pretrained(model_dir, pooler="mean")
    encoder.__class__ = PoisonEncoder
    app = create_app(encoder, "tiny", "f" * 64)
    texts = [f"sentence number {i} about a cat" for i in range(12)]
    expected = SentenceEncoder.from_pretrained(model_dir, pooler="mean").encode(
        texts, normalize=True
    )

    async def scenario():
        await app.state.batcher.start()
        transport = httpx.ASGITransport(app=app)
        try:
            # in-process ASGI transport: "http://t" is never resolved, nothing leaves the process
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                inputs = [*texts[:5], POISON_TEXT, *texts[5:]]
                return await asyncio.gather(
                    *(c.post("/v1/embeddings", json={"input": t}) for t in inputs)
                )
        finally:
            await app.state.batcher.close()

    responses = asyncio.run(scenario())
    bad = responses.pop(5)
    error = _error(bad, 500)
    assert error["code"] == "encode_failed" and "TypeError" in error["message"]
    assert [r.status_code for r in responses] == [200] * 12
    got = np.array([r.json()["data"][0]["embedding"] for r in responses], dtype=np.float32)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert app.state.batcher.stats.batches < 13, "the requests were batched together"


def test_poison_mixed_into_32_concurrent_clients(client, server):
    async def one(c, i):
        text = "\ud800 poison" if i % 8 == 0 else f"good sentence {i}"
        return i, await c.post("/v1/embeddings", **escaped({"input": [text, "another text"]}))

    async def scenario():
        async with httpx.AsyncClient(base_url=server.url, timeout=30, headers=AUTH) as c:
            return await asyncio.gather(*(one(c, i) for i in range(32)))

    for i, response in asyncio.run(scenario()):
        assert response.status_code == (400 if i % 8 == 0 else 200), response.text[:300]


# ---- slow clients -------------------------------------------------------------------------------
def test_slow_header_connections_do_not_block_the_service(server, client):
    host, port = server.url.removeprefix("http://").split(":")  # the test server on 127.0.0.1
    held = []
    try:
        for _ in range(SLOW_CONNECTIONS):
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            held.append(sock)
        time.sleep(0.3)  # every connection is open and half-sent
        tic = time.monotonic()
        response = client.post("/v1/embeddings", json={"input": "still served"})
        assert response.status_code == 200, response.text[:300]
        assert time.monotonic() - tic < HEADER_TIMEOUT_S
        # Past the header deadline the server has answered 408 and closed every slow connection.
        time.sleep(HEADER_TIMEOUT_S + 1.0)
        held[0].settimeout(5)
        answer = held[0].recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
        assert b"header_timeout" in answer
    finally:
        for sock in held:
            sock.close()


def _open(server, n, first_bytes=b""):
    host, port = server.url.removeprefix("http://").split(":")  # the test server on 127.0.0.1
    socks = []
    for _ in range(n):
        sock = socket.create_connection((host, int(port)))
        if first_bytes:
            sock.sendall(first_bytes)
        socks.append(sock)
    return socks


def _answer(sock, timeout=10.0):
    """What the server sent before closing the connection (or within `timeout`)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(4096):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


SLOW_BODY_HEAD = (b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                  b"application/json\r\nContent-Length: 2000\r\n\r\n{")  # fmt: skip


@pytest.mark.parametrize("parser", PARSERS)
def test_slow_bodies_hold_no_in_flight_slot_and_are_cut_at_the_rate_floor(model_dir, parser):
    """Issue 25 item 1: 135 connections with complete headers trickling their bodies held every
    in-flight slot (good requests got 503 for 60 s). Now a slot is taken once a body has arrived,
    and a body slower than the floor (1 KB/s after 5 s) gets 408 long before the 60 s deadline."""
    args = [str(model_dir), "--pooler", "mean", "--max-in-flight", "4", "--http", parser]
    with serve_process(args) as proc, httpx.Client(base_url=proc.url, timeout=30) as good:
        held = _open(proc, 12, SLOW_BODY_HEAD)  # three times max_in_flight
        try:
            time.sleep(0.5)
            for i in range(8):
                response = good.post("/v1/embeddings", json={"input": f"served {i}"})
                assert response.status_code == 200, response.text[:300]
            tic = time.monotonic()
            answer = _answer(held[0], timeout=15)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
            assert b"body_too_slow" in answer and time.monotonic() - tic < 10
            # issue 47 point 2: the 408 closes the socket (it stayed open, holding a place at
            # the connection cap): _answer returned on the server's close, not on its timeout
            assert b"connection: close" in answer.lower()
            assert time.monotonic() - tic < 10
            held[0].settimeout(2)
            assert held[0].recv(1) == b""  # end of stream: closed by the server
        finally:
            for sock in held:
                sock.close()


@pytest.mark.parametrize("parser", PARSERS)
def test_silent_sockets_past_the_cap_make_room_for_real_requests(model_dir, parser):
    """Issue 25 item 2: sockets that send nothing, past --max-connections, got every good
    request uvicorn's plain-text 503 until the header deadline. Now sockets opened past the cap
    that stay silent for a second are closed (JSON 503, Retry-After), past the hard cap the
    oldest silent ones make room, and good requests are served all along."""
    args = [str(model_dir), "--pooler", "mean", "--max-connections", "16",
            "--header-timeout", "30", "--http", parser]  # fmt: skip
    with serve_process(args) as proc:
        held = _open(proc, 40)  # 2.5 times the cap (hard cap 32), all silent, one address
        try:
            with httpx.Client(base_url=proc.url, timeout=10) as good:
                for i in range(10):
                    tic = time.monotonic()
                    response = good.post("/v1/embeddings", json={"input": f"served {i}"})
                    assert response.status_code == 200, response.text[:300]
                    assert time.monotonic() - tic < 5
                    time.sleep(0.2)
            for sock in (held[0], held[20]):  # displaced at the hard cap; shed after the grace
                answer = _answer(sock)
                assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
                assert b"application/json" in answer and b"retry-after: 1" in answer.lower()
                assert b"too_many_connections" in answer
            assert _answer(held[15], timeout=0.5) == b""  # within the cap: left alone
        finally:
            for sock in held:
                sock.close()


def test_unparsable_request_gets_a_json_400(server):
    """Issue 25 item 10: h11-level 400s were plain text."""
    (sock,) = _open(server, 1, b"NOT HTTP AT ALL\r\n\r\n")
    try:
        answer = _answer(sock)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400") and b"application/json" in head
    assert json.loads(body)["error"]["code"] == "bad_http_request"


def _json_400(server, request: bytes) -> tuple[bytes, dict]:
    """Send raw `request` on a new connection; the server's whole answer must be a JSON 400
    that closes the connection. Returns the answer and its error object."""
    (sock,) = _open(server, 1, request)
    try:
        answer = _answer(sock)
    finally:
        sock.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:300]
    assert b"application/json" in head and b"connection: close" in head.lower()
    return answer, json.loads(body)["error"]


def _smuggling_attempt(version=b"1.1", content_length=True):
    """A POST framed by both Content-Length and chunks, with a second request pipelined behind
    it; a proxy framing by Content-Length would forward the tail as the body's end."""
    body = b'{"input": "a"}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    head = (b"POST /v1/embeddings HTTP/%s\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            % (version, API_KEY.encode()))  # fmt: skip
    if content_length:
        head += b"Content-Length: %d\r\n" % len(chunked)
    smuggled = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n"
    return head + b"\r\n" + chunked + smuggled % API_KEY.encode()


@pytest.mark.parametrize(
    ("version", "content_length"), [(b"1.1", True), (b"1.0", True), (b"1.0", False)]
)
def test_ambiguous_framing_is_a_400_and_the_connection_is_closed(server, version, content_length):
    """Issue 39 item 2: a request with both Content-Length and Transfer-Encoding: chunked was
    served and the connection kept open, so the request pipelined behind it was answered too
    (request smuggling behind a proxy that frames by Content-Length). RFC 9112 §6.1: an error,
    and the connection closed; likewise Transfer-Encoding in HTTP/1.0."""
    answer, error = _json_400(server, _smuggling_attempt(version, content_length))
    assert error["code"] == "ambiguous_framing" and "RFC 9112" in error["message"]
    assert answer.count(b"HTTP/1.1 ") == 1, "nothing pipelined behind it is answered"


@pytest.mark.parametrize(
    ("head", "refused"),
    [
        (b"Transfer-Encoding: chunked\r\nContent-Length: 3", "both Content-Length and"),
        (b"TRANSFER-ENCODING: Chunked\r\ncontent-length: 0", "both Content-Length and"),
        (b"Transfer-Encoding:\tchunked\r\nContent-Length: 3", "both Content-Length and"),
        (b"Content-Length: 3\r\nContent-Length: 4", "conflicting Content-Length"),
        (b"Transfer-Encoding: gzip, chunked", "Only Transfer-Encoding: chunked"),
        (b"Transfer-Encoding : chunked", "illegal header line"),
        (b"Transfer-Encoding: chunked", None),
        (b"Content-Length: 3", None),
    ],
)
def test_framing_check_in_h11(head, refused):
    """The connection class under GuardedH11Protocol: what h11 refuses itself and what the
    check adds (issue 39 item 2), without a server."""
    import h11

    from dclr.serving.protocols import FramingCheckedConnection

    conn = FramingCheckedConnection(h11.SERVER)
    conn.receive_data(b"POST / HTTP/1.1\r\nHost: a\r\n" + head + b"\r\n\r\n")
    if refused is None:
        assert isinstance(conn.next_event(), h11.Request)
        return
    with pytest.raises(h11.RemoteProtocolError, match=refused):
        conn.next_event()


FRAMING = ("ambiguous_framing",)
EITHER = ("ambiguous_framing", "bad_http_request")  # which one depends on the parser


@pytest.mark.parametrize(
    ("head", "codes"),
    [
        pytest.param(b"Transfer-Encoding: chunked\r\nContent-Length: 3", FRAMING, id="te-cl"),
        pytest.param(b"Content-Length: 3\r\nTransfer-Encoding: chunked", FRAMING, id="cl-te"),
        pytest.param(b"Content-Length: 3\r\nContent-Length: 4", EITHER, id="two-lengths"),
        pytest.param(b"Transfer-Encoding: gzip, chunked", EITHER, id="gzip-chunked"),
        pytest.param(b"Transfer-Encoding : chunked", EITHER, id="space-before-colon"),
        # an unfinished head over the 16 KiB bound
        pytest.param(b"X-Big: " + b"a" * 20_000, ("bad_http_request",), id="head-20k"),
    ],
)
def test_every_parser_answers_a_bad_head_with_json_400_and_closes(server, head, codes):
    """The same refusals whichever parser reads the request (llhttp refuses some heads itself,
    h11 others; the guard's framing check and head bound cover the rest). Each is refused on
    its head alone: nothing follows it, and the long head never ends."""
    end = b"" if head.startswith(b"X-Big") else b"\r\n\r\n"
    request = b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + end
    _, error = _json_400(server, request)
    assert error["code"] in codes


@pytest.mark.parametrize(
    ("headers", "version", "refused"),
    [
        ([(b"transfer-encoding", b"chunked")], b"1.1", None),
        ([(b"content-length", b"3")], b"1.1", None),
        ([(b"transfer-encoding", b"chunked"), (b"content-length", b"3")], b"1.1", "both"),
        ([(b"transfer-encoding", b"chunked")], b"1.0", "HTTP/1.0"),
        ([(b"transfer-encoding", b"gzip, chunked")], b"1.1", "only Transfer-Encoding: chunked"),
        (
            [(b"transfer-encoding", b"chunked"), (b"transfer-encoding", b"chunked")],
            b"1.1",
            "only Transfer-Encoding: chunked",
        ),  # fmt: skip
        ([(b"transfer-encoding", b" Chunked ")], b"1.1", None),
    ],
)
def test_framing_problem(headers, version, refused):
    from dclr.serving.protocols import framing_problem

    problem = framing_problem(headers, version)
    assert (problem is None) if refused is None else (refused in problem)


def test_chunked_request_without_content_length_is_still_served(server):
    (sock,) = _open(server, 1, _smuggling_attempt(b"1.1", content_length=False))
    try:
        answer = _answer(sock, timeout=5)
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert answer.count(b"HTTP/1.1 200") == 2, "both requests, each framed one way, are served"


def test_body_that_never_arrives_gets_408():
    sent = []

    async def app(scope, receive, send):  # pragma: no cover - never reached
        raise AssertionError("the app must not run")

    async def receive():
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    middleware = BodyLimitMiddleware(app, max_bytes=1000, timeout_s=0.2)
    scope = {"type": "http", "headers": [(b"content-length", b"100")]}
    asyncio.run(middleware(scope, receive, send))
    assert sent[0]["status"] == 408 and b"body_timeout" in sent[1]["body"]


def test_past_max_in_flight_a_request_gets_503_and_a_freed_slot_is_taken_again():
    """The cap that the slow-body test keeps free: without this, a cap that never refuses
    would pass that test too. Two requests held inside the app fill max_in_flight=2; the third
    gets 503 with Retry-After unread; once one finishes, the next is served."""
    from dclr.serving.guard import InFlightMiddleware

    async def scenario():
        release = asyncio.Event()
        entered: list[int] = []

        async def app(scope, receive, send):
            entered.append(scope["n"])
            await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})

        middleware = InFlightMiddleware(app, max_in_flight=2)

        async def call(n):
            sent = []

            async def send(message):
                sent.append(message)

            await middleware({"type": "http", "n": n}, None, send)
            return sent

        held = [asyncio.ensure_future(call(n)) for n in (1, 2)]
        await asyncio.sleep(0)
        refused = await asyncio.wait_for(call(3), 2)  # a cap that lets it in: held, timeout
        release.set()
        await asyncio.gather(*held)
        served = await call(4)
        return entered, refused, served

    entered, refused, served = asyncio.run(scenario())
    assert entered == [1, 2, 4]
    assert refused[0]["status"] == 503 and (b"retry-after", b"1") in refused[0]["headers"]
    assert b"too_many_requests_in_flight" in refused[1]["body"]
    assert served[0]["status"] == 200


# ---- strangers ----------------------------------------------------------------------------------
def test_api_key_is_required_and_compared(server):
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        error = _error(anonymous.post("/v1/embeddings", json={"input": "x"}), 401)
        assert error["code"] == "invalid_api_key"
        wrong = {"Authorization": "Bearer wrong-key-000000"}
        _error(anonymous.post("/v1/embeddings", json={"input": "x"}, headers=wrong), 401)
        _error(anonymous.get("/health"), 401)
        assert anonymous.get("/").status_code == 200, "the page itself is public"
        ok = anonymous.post("/v1/embeddings", json={"input": "x"}, headers={"X-API-Key": API_KEY})
        assert ok.status_code == 200


def test_foreign_host_header_is_refused_on_loopback(client, server):
    port = server.url.rsplit(":", 1)[1]
    error = _error(client.get("/health", headers={"Host": f"evil.example:{port}"}), 421)
    assert error["code"] == "host_not_allowed" and "evil.example" in error["message"]
    assert client.get("/health", headers={"Host": f"localhost:{port}"}).status_code == 200


@pytest.mark.parametrize("host", ["127.0.0.1:80@evil.com", "[::1]evil.com", "localhost evil.com",
                                  "127.0.0.1:80:81"])  # fmt: skip
def test_host_headers_that_only_start_like_loopback_are_refused(host):
    """Issue 25 item 10: strict host[:port] parsing; a trailing '@evil.com' is not localhost."""
    from dclr.serving.guard import host_name

    assert host_name(host.encode()) == ""
    assert host_name(b"[::1]:8000") == "::1" and host_name(b"LocalHost:80") == "localhost"


def test_public_host_without_api_key_is_refused(model_dir, monkeypatch):
    monkeypatch.delenv("DCLR_API_KEY", raising=False)
    result = CliRunner().invoke(cli_app, ["serve", str(model_dir), "--host", "0.0.0.0"])
    assert result.exit_code == 2
    assert "no API key" in result.output and "--allow-no-auth" in result.output


# ---- the queue: tokens, waiting time, departed clients --------------------------------------------
def char_tokens(texts):
    """A stand-in tokenizer: one token per character, each token id the character's code."""
    return [[ord(c) for c in text] for text in texts]


def _slow_encode(delay):
    seen = []

    def encode(ids):
        seen.extend("".join(map(chr, x)) for x in ids)
        time.sleep(delay)
        return (np.zeros((len(ids), 2), dtype=np.float32),)

    return encode, seen


def test_queue_bound_counts_tokens_not_texts():
    encode, _ = _slow_encode(0.2)

    async def scenario():
        batcher = EmbeddingBatcher(
            char_tokens, encode, Batching(max_pending=512, max_pending_tokens=5_000)
        )
        await batcher.start()
        try:
            first = asyncio.ensure_future(batcher.submit(["short"] * 4))
            await asyncio.sleep(0)
            with pytest.raises(Overloaded) as err:
                await batcher.submit(["x" * 4000] * 2)  # 2 texts, but 8000 tokens
            assert err.value.retry_after >= 1
            short = await batcher.submit(["short"] * 20)  # 20 texts, few tokens: admitted
            await first
            return short
        finally:
            await batcher.close()

    assert len(asyncio.run(scenario())[0]) == 20


def test_queue_refuses_before_clients_would_time_out():
    encode, _ = _slow_encode(0.1)

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch=1, max_queue_wait=0.5))
        await batcher.start()
        try:
            await batcher.submit(["x" * 100])  # measures the rate: ~1000 tokens/s
            accepted, refused = [], []
            for _ in range(20):
                try:
                    accepted.append(asyncio.ensure_future(batcher.submit(["y" * 100])))
                    await asyncio.sleep(0)
                    await asyncio.sleep(0)
                except Overloaded as err:
                    refused.append(err)
            results = await asyncio.gather(*accepted, return_exceptions=True)
            return results, batcher.stats
        finally:
            await batcher.close()

    results, stats = asyncio.run(scenario())
    refused = [r for r in results if isinstance(r, Overloaded)]
    assert stats.refused >= 5 and refused, "the queue refused once it held ~0.5 s of work"
    assert all(r.retry_after == 1 for r in refused)  # ~0.5 s of work ahead, rounded up
    assert stats.tokens_per_s > 0


def test_queue_admits_against_the_live_throughput():
    """Issue 25 item 9: under an outside load the queue admitted work at the rate it measured
    before the load, and clients timed out unanswered. A batch that overruns the measured rate
    lowers the estimate while it runs, so the next request is refused at once."""
    delays = iter([0.01] + [1.0] * 10)  # the machine gets 100x slower after the first batch

    def encode(ids):
        time.sleep(next(delays))
        return (np.zeros((len(ids), 2), dtype=np.float32),)

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch=1, max_queue_wait=0.3))
        await batcher.start()
        try:
            await batcher.submit(["x" * 100])  # measured: ~10,000 tokens/s
            fast = batcher.stats.tokens_per_s
            slow = asyncio.ensure_future(batcher.submit(["x" * 100]))
            await asyncio.sleep(0.3)  # that batch has overrun the measured rate 30x
            assert batcher.live_rate() < fast / 10
            with pytest.raises(Overloaded, match="current throughput"):
                await batcher.submit(["y" * 100])  # ~0.03 s at the old rate, ~0.6 s now
            await slow
        finally:
            await batcher.close()

    asyncio.run(scenario())


def test_client_timeout_header_bounds_the_wait():
    """A client that says it waits 1 s (OpenAI's client: x-stainless-timeout) is refused at
    once when the queue would take longer, though max_queue_wait would admit it."""
    from dclr.serving.headers import client_timeout_s

    assert client_timeout_s({"x-stainless-timeout": "600"}) == pytest.approx(480)
    assert client_timeout_s({"x-request-timeout": "nan"}) is None
    assert client_timeout_s({"x-request-timeout": "-1"}) is None
    assert client_timeout_s({}) is None
    encode, _ = _slow_encode(0.2)

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch=1, max_queue_wait=10))
        await batcher.start()
        try:
            await batcher.submit(["x" * 100])  # ~500 tokens/s
            queued = [asyncio.ensure_future(batcher.submit(["z" * 100])) for _ in range(4)]
            await asyncio.sleep(0)
            with pytest.raises(Overloaded, match="your timeout"):
                await batcher.submit(["y" * 100], deadline_s=0.5)
            admitted = await batcher.submit(["y" * 100])  # no deadline: 10 s allowed
            await asyncio.gather(*queued)
            return admitted
        finally:
            await batcher.close()

    assert len(asyncio.run(scenario())[0]) == 1


def test_work_of_departed_clients_is_dropped():
    encode, seen = _slow_encode(0.3)

    async def scenario():
        batcher = EmbeddingBatcher(char_tokens, encode, Batching(max_batch=1))
        await batcher.start()
        try:
            running = asyncio.ensure_future(batcher.submit(["being encoded"]))
            await asyncio.sleep(0.05)
            gone = asyncio.ensure_future(batcher.submit(["client left"]))
            await asyncio.sleep(0.01)
            assert batcher.stats.pending_texts == 1  # the running pass's text left the queue
            gone.cancel()
            await asyncio.sleep(0)
            assert batcher.stats.pending_texts == 0, "dropped from the queue at once"
            await running
            await batcher.submit(["next"])
            return batcher.stats
        finally:
            await batcher.close()

    stats = asyncio.run(scenario())
    assert "client left" not in seen and stats.dropped == 1
    assert stats.pending_texts == 0 and stats.pending_tokens == 0


def test_head_requests_and_100_continue_are_answered(server):
    """Both parsers answer a HEAD request, and a client that waits for 100 Continue gets it,
    then its answer."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
                     b"Connection: close\r\n\r\n" % API_KEY.encode())  # fmt: skip
        assert _answer(sock, timeout=5).startswith(b"HTTP/1.1 ")
    body = b'{"input": "expecting"}'
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
                     b"%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: "
                     b"100-continue\r\nConnection: close\r\n\r\n" % (API_KEY.encode(), len(body)))  # fmt: skip
        sock.settimeout(5)
        assert sock.recv(4096).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        answer = _answer(sock, timeout=5)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_parser_and_loop_choices(monkeypatch):
    """`--http` and `--loop`: auto takes the C parser and uvloop when installed, falls back to
    h11 and asyncio when not, and an explicit choice that cannot be met is an error naming the
    fix, before any socket is bound."""
    import sys

    from dclr.serving.protocols import GuardedH11Protocol, protocol_with
    from dclr.serving.server import event_loop

    assert issubclass(
        protocol_with(Connections(header_timeout=5.0, http="h11")), GuardedH11Protocol
    )
    with pytest.raises(ValueError, match="unknown HTTP parser"):
        protocol_with(Connections(header_timeout=5.0, http="zttp"))
    with pytest.raises(ValueError, match="unknown event loop"):
        event_loop("trio")
    assert event_loop("asyncio") == "asyncio"
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "httptools", None)
    assert event_loop("auto") == "asyncio"
    with pytest.raises(ValueError, match="pip install"):
        event_loop("uvloop")
    assert available_parsers() == ("h11",)
    assert issubclass(protocol_with(Connections(header_timeout=5.0)), GuardedH11Protocol)
    with pytest.raises(ValueError, match="needs httptools"):
        protocol_with(Connections(header_timeout=5.0, http="httptools"))
