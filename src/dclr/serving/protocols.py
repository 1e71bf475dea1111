"""uvicorn's HTTP/1.1 protocols with dclr's connection guard: httptools (default) and h11.

Slow clients: uvicorn bounds the idle time between keep-alive requests but not the time a client
takes to send a request's headers, so connections that send a partial header and stall (slowloris)
stay open for ever, and uvicorn's concurrency limit counts them. `ConnectionGuard` adds that
bound: a connection that has not sent a complete request head within `header_timeout` of its
first byte (or of opening) gets 408 and is closed. Open sockets are capped in all and per client
address, and past a cap sockets that send nothing are shed, not real requests.
A request whose body framing is ambiguous (Content-Length and Transfer-Encoding together,
Transfer-Encoding in HTTP/1.0, or a transfer coding other than `chunked`: request smuggling
behind a proxy) gets a JSON 400 `ambiguous_framing` and its connection is closed, so nothing
pipelined behind it is read (RFC 9112 §6.1). Every error the protocol answers itself is JSON in
the service's error shape.

Two parsers, one guard: `GuardedHttpToolsProtocol` parses with httptools (llhttp, in C), and is
the default when httptools is installed (`pip install dclr[serve]` brings it): it takes ~0.2 ms
less server CPU per request than h11 under 32 concurrent one-text clients (docs/performance.md).
`GuardedH11Protocol` parses with h11 (pure Python), the fallback and `dclr serve --http h11`.
The guard's own state (timers, byte counts, caps) lives in `ConnectionGuard`; each protocol
says when it is waiting for a request head and when it is idle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import time
from dataclasses import replace
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from dclr.serving.errors import closing_headers, error_body, raw_error
from dclr.serving.middleware import MIN_BODY_RATE
from dclr.serving.settings import Connections

# Bytes a request head may take (request line and headers): h11's own default bound, which the
# httptools protocol keeps too (llhttp has none).
MAX_HEAD_BYTES = 16 * 1024
# Seconds a connection opened past a cap has to send its first byte before it is closed: a real
# client sends its request head at once.
GRACE_S = 1.0
# A connection that has received nothing for this long counts as idle (keep-alive between
# requests) and may be closed to make room at the hard cap.
IDLE_S = 1.0
# A connection open this long whose request body is still arriving, on average slower than the
# body-rate floor (dclr.serving.middleware.MIN_BODY_RATE), is a trickler (issue 47: 1,300 of them
# shut good clients out at the cap); at the hard cap it is closed before any keep-alive
# connection of a client that sends whole requests. A real upload arrives far above the floor.
SLOW_BODY_S = 0.5
# What the two parsers refuse themselves, in the words of the framing check.
_BOTH_FRAMINGS = (
    "the request carries both Content-Length and Transfer-Encoding, so its body can be read two "
    "ways (RFC 9112 §6.1); send one of them"
)


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on a connection's socket (whoever created the listening socket): a small
    response goes out at once instead of waiting for the client's delayed ACK (see
    `dclr.serving.server.bind`)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # the peer may already be gone
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def hard_cap(soft: int) -> int:
    """Sockets open at most: the soft cap plus room for new connections to show they are real."""
    return soft + max(16, soft // 8)


def framing_problem(headers: list[tuple[bytes, bytes]], http_version: bytes) -> str | None:
    """Why a request's body framing is ambiguous (RFC 9112 §6.1, §6.3), or None.

    headers: (lower-cased name, value) pairs; http_version: b"1.1" or b"1.0"."""
    codings = [value for name, value in headers if name == b"transfer-encoding"]
    if not codings:
        return None
    if any(name == b"content-length" for name, _ in headers):
        return _BOTH_FRAMINGS
    if http_version == b"1.0":
        return (
            "an HTTP/1.0 request with Transfer-Encoding has no reliable framing "
            "(RFC 9112 §6.1); send HTTP/1.1, or Content-Length"
        )
    if [c.strip().lower() for value in codings for c in value.split(b",")] != [b"chunked"]:
        return (
            "only Transfer-Encoding: chunked is supported (a proxy may decode other codings "
            "differently, RFC 9112 §6.1); send the body chunked or with Content-Length"
        )
    return None


class ConnectionGuard(asyncio.Protocol):
    """The guard shared by dclr's protocols (mixed in before uvicorn's protocol class): a
    deadline on receiving each request's head, caps on open connections in all and per client
    address, and JSON for every error it answers itself.

    A connection opened past a cap (`max_connections` in all, `max_connections_per_client` from one)
    is kept only if it sends a byte within GRACE_S; a silent one is then closed with a JSON 503
    and Retry-After. Past the hard cap (`hard_cap(max_connections)`, which bounds file
    descriptors) a new connection makes room by closing the oldest connection that never sent a
    byte, else the request whose body arrives slowest (a trickler), else the one idle longest
    between keep-alive requests; only when every
    open connection is busy is the new one refused. A client that opens sockets and sends nothing
    therefore sheds its own sockets, and a real request, which sends its head at once, is served.

    A protocol using it says `_head_pending()` (no complete head of the current request yet) and
    `_idle()` (no request being received or answered), and calls `_head_complete()` when a
    request head has arrived."""

    bounds = Connections()  # protocol_with sets a subclass's
    # set by uvicorn's protocol classes
    connections: set[Any]
    transport: asyncio.Transport
    client: tuple[str, int] | None
    loop: asyncio.AbstractEventLoop

    def _head_pending(self) -> bool:
        raise NotImplementedError

    def _idle(self) -> bool:
        raise NotImplementedError

    def _body_pending(self) -> bool:
        """A request head arrived and its body has not arrived in full."""
        raise NotImplementedError

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        set_nodelay(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._grace_timer: asyncio.TimerHandle | None = None
        self._received = 0  # bytes received on this connection
        self._last_data = self._opened = time.monotonic()
        super().connection_made(transport)
        self._peer = self.client[0] if self.client else None
        open_ = self._open()  # one pass over the connections per new one
        if not self._make_room(open_):
            return
        if self._over_a_cap(open_):
            self._grace_timer = self.loop.call_later(GRACE_S, self._grace_over)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self.transport.is_closing():
            return  # refused or displaced: nothing more is read
        self._received += len(data)
        self._last_data = time.monotonic()
        if self._header_timer is None and self._head_pending():
            self._arm_header_timer()  # the first bytes of the next request on this connection
        self._parse(data)

    def _parse(self, data: bytes) -> None:
        super().data_received(data)  # uvicorn's protocol parses

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _head_complete(self) -> None:
        self._disarm_header_timer()

    # ---- the connection caps ------------------------------------------------------------------
    def _open(self) -> list[Any]:
        return [c for c in self.connections if not c.transport.is_closing()]

    def _over_a_cap(self, open_: list[Any]) -> bool:
        same = sum(1 for c in open_ if getattr(c, "_peer", None) == self._peer)
        return (
            len(open_) > self.bounds.max_connections
            or same > self.bounds.max_connections_per_client
        )

    def _make_room(self, open_: list[Any]) -> bool:
        """Keep the open connections within the hard cap; False when this one was refused."""
        if len(open_) <= hard_cap(self.bounds.max_connections):
            return True
        victim = _displaceable([c for c in open_ if c is not self])
        if victim is None:
            self._answer_busy("the server holds as many connections as it may")
            return False
        why = "sent no request" if victim._received == 0 else "stalled or idle"
        victim._answer_busy(f"closed to make room: this connection {why}")
        return True

    def _grace_over(self) -> None:
        self._grace_timer = None
        if self.transport.is_closing() or self._received or not self._over_a_cap(self._open()):
            return
        self._answer_busy(
            f"the server is at its connection cap and this connection sent nothing within "
            f"{GRACE_S:g} s"
        )

    def _answer_busy(self, why: str) -> None:
        self._disarm_header_timer()
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
        busy = raw_error("too_many_connections", f"{why}; retry shortly", [(b"retry-after", b"1")])
        self.transport.write(busy)
        self._close()

    def _close(self) -> None:
        """Close this connection and stop counting it at once: uvicorn drops a connection from
        `connections` (which its own concurrency limit counts) in connection_lost, which uvloop
        calls a loop turn or more later, so a new connection let in by displacing this one
        could otherwise be refused as over the limit."""
        self.transport.close()
        self.connections.discard(self)

    # ---- the header deadline ------------------------------------------------------------------
    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.bounds.header_timeout, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not self._head_pending():
            return  # a request is being handled: its body has its own deadline
        message = f"the request head did not arrive within {self.bounds.header_timeout:g} s"
        self.transport.write(raw_error("header_timeout", message))
        self._close()


class GuardedH11Protocol(ConnectionGuard, H11Protocol):
    """uvicorn's h11 protocol with the guard, the framing check and JSON 400s."""

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        size = config.h11_max_incomplete_event_size  # None: h11's default, as uvicorn does
        sizes = {} if size is None else {"max_incomplete_event_size": size}
        self.conn = FramingCheckedConnection(h11.SERVER, **sizes)

    def _head_pending(self) -> bool:
        return self.conn.their_state is h11.IDLE

    def _idle(self) -> bool:
        return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE

    def _body_pending(self) -> bool:
        return self.conn.their_state is h11.SEND_BODY

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a complete request head arrived
            self._head_complete()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse, or whose framing is ambiguous: JSON in the service's
        error shape, not plain text, and the connection closed (nothing after it is read)."""
        problem = getattr(self.conn, "framing_problem", None)
        if problem is not None:
            body = error_body("ambiguous_framing", f"ambiguous HTTP framing: {problem}")
        else:
            body = error_body("bad_http_request", f"malformed HTTP request: {msg}")
        headers = closing_headers(body)
        event = h11.Response(status_code=400, headers=headers, reason=b"Bad Request")
        for part in (event, h11.Data(data=body), h11.EndOfMessage()):
            try:
                self.transport.write(self.conn.send(part))
            except h11.LocalProtocolError:  # the connection is past sending a response
                break
        self.transport.close()


class FramingCheckedConnection(h11.Connection):
    """h11's server side, refusing a request whose body framing two parsers could read apart.

    h11 already refuses conflicting Content-Length values and any Transfer-Encoding but a single
    `chunked`; it serves a request carrying both Content-Length and Transfer-Encoding (framed by
    the chunks), which a proxy that frames by Content-Length reads differently: the bytes after
    the chunks become a second, smuggled request. RFC 9112 §6.1 says to treat such a message as
    an error or close the connection after it; so is Transfer-Encoding in an HTTP/1.0 request.
    `next_event` raises h11.RemoteProtocolError for both, naming the problem in
    `framing_problem`, and the protocol answers 400 and closes (`send_400_response`)."""

    framing_problem: str | None = None

    def next_event(self) -> Any:
        event = super().next_event()
        if isinstance(event, h11.Request):
            problem = framing_problem(list(event.headers), event.http_version)
            if problem is not None:
                self.framing_problem = problem
                raise h11.RemoteProtocolError(problem, error_status_hint=400)
        return event


@functools.cache
def _httptools_protocol() -> type:
    """GuardedHttpToolsProtocol, built once, on first use (httptools is optional)."""
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(ConnectionGuard, HttpToolsProtocol):
        """uvicorn's httptools protocol with the guard, the framing check, a bound on the request
        head's size and JSON 400s. llhttp refuses conflicting Content-Lengths, Content-Length
        beside Transfer-Encoding and malformed header lines itself; `framing_problem` adds
        Transfer-Encoding in HTTP/1.0 and codings other than `chunked`."""

        def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            size = config.h11_max_incomplete_event_size
            self._max_head = MAX_HEAD_BYTES if size is None else size
            self._awaiting_head = True  # no complete head since the last request ended
            self._head_bytes = 0  # bytes received while a head was pending
            self._framing: str | None = None

        def _head_pending(self) -> bool:
            return self._awaiting_head and (self.cycle is None or self.cycle.response_complete)

        def _idle(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _body_pending(self) -> bool:
            return not self._awaiting_head  # between the head and the end of the message

        # uvicorn's data_received, with its plain-text 400 replaced and the head bounded
        def _parse(self, data: bytes) -> None:
            self._unset_keepalive_if_required()
            if self._awaiting_head:
                self._head_bytes += len(data)
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade:
                if self._should_upgrade():
                    self.handle_websocket_upgrade()
                else:
                    self._unsupported_upgrade_warning()
            except httptools.HttpParserError as err:
                self._refuse(str(err))
                return
            if self._awaiting_head and self._head_bytes > self._max_head:
                self._refuse(f"the request head is over {self._max_head} bytes")

        def _refuse(self, parser_message: str) -> None:
            both = "Content-Length" in parser_message and "Transfer-Encoding" in parser_message
            if self._framing is None and both:  # llhttp's words, either header first
                self._framing = _BOTH_FRAMINGS
            if self._framing is not None:
                answer = raw_error("ambiguous_framing", f"ambiguous HTTP framing: {self._framing}")
            else:
                answer = raw_error("bad_http_request", f"malformed HTTP request: {parser_message}")
            self.transport.write(answer)
            self.transport.close()

        def send_400_response(self, msg: str) -> None:  # uvicorn's callers: never plain text
            self._refuse(msg)

        def on_headers_complete(self) -> None:
            version = self.parser.get_http_version().encode("ascii")
            problem = framing_problem(self.headers, version)
            if problem is not None:
                self._framing = problem
                raise httptools.HttpParserError(problem)  # stops the parser: nothing after it
            self._awaiting_head = False
            self._head_bytes = 0
            self._head_complete()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._awaiting_head = True

    return GuardedHttpToolsProtocol


def _trickling(connection: ConnectionGuard, now: float) -> bool:
    """Open SLOW_BODY_S or more and, on average, receiving slower than the body-rate floor."""
    age = now - connection._opened
    return age >= SLOW_BODY_S and connection._received / age < MIN_BODY_RATE


def _displaceable(group: list[Any]) -> Any:
    """The connection to close for a new one: the oldest that never sent a byte, else the
    request body arriving slowest (below the body-rate floor), else the one idle longest between
    requests, else None (all are busy)."""
    now = time.monotonic()
    guarded = [c for c in group if isinstance(c, ConnectionGuard)]
    silent = [c for c in guarded if c._received == 0]
    if silent:
        return min(silent, key=lambda c: c._opened)
    stalled = [c for c in guarded if c._body_pending() and _trickling(c, now)]
    if stalled:
        return min(stalled, key=lambda c: c._received / (now - c._opened))  # the slowest
    idle = [c for c in guarded if c._idle() and now - c._last_data >= IDLE_S]
    return min(idle, key=lambda c: c._last_data) if idle else None


def available_parsers() -> tuple[str, ...]:
    """The HTTP parsers `protocol_with` can use here, the default first."""
    try:
        import httptools  # noqa: F401
    except ImportError:
        return ("h11",)
    return ("httptools", "h11")


def protocol_with(connections: Connections) -> type[asyncio.Protocol]:
    """A guarded protocol class with these bounds and parser (uvicorn takes a class).

    `connections.http`: "httptools", "h11", or "auto" (httptools when installed)."""
    parsers = available_parsers()
    http = connections.http
    parser = parsers[0] if http == "auto" else http  # a name `Connections` checked
    if parser not in parsers:
        raise ValueError("--http httptools needs httptools: pip install 'dclr[serve]'")
    base = _httptools_protocol() if parser == "httptools" else GuardedH11Protocol
    per_client = min(connections.max_connections_per_client, connections.max_connections)
    bounds = replace(connections, max_connections_per_client=per_client)
    return type(base.__name__, (base,), {"bounds": bounds})
