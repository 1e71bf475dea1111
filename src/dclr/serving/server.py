"""Run an ASGI app with uvicorn on a socket we bind ourselves (so port 0 works and is reported).

The bound address is printed as `dclr serve: listening on http://HOST:PORT/` (flushed) before the
first request can arrive: scripts and tests read the port from that line.

Slow clients: uvicorn bounds the idle time between keep-alive requests but not the time a client
takes to send a request's headers, so connections that send a partial header and stall (slowloris)
stay open for ever, and uvicorn's concurrency limit counts them. `GuardedH11Protocol` adds that
bound: a connection that has not sent a complete request head within `header_timeout_s` of its
first byte (or of opening) gets 408 and is closed. Open sockets are capped in all and per client
address, and past a cap sockets that send nothing are shed, not real requests
(`GuardedH11Protocol`).
A request whose body framing is ambiguous (Content-Length and Transfer-Encoding together, or
Transfer-Encoding in HTTP/1.0: request smuggling behind a proxy) gets a JSON 400
`ambiguous_framing` and its connection is closed, so nothing pipelined behind it is read
(`FramingCheckedConnection`, RFC 9112 §6.1).
The limit on requests handled at once lives in `dclr.serving.guard` and counts requests whose
body has fully arrived, not connections. Facing the internet, run behind a reverse proxy all the same (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import resource
import socket
import sys
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# Open sockets at most (idle keep-alive and half-sent requests included); past it uvicorn answers
# 503. Requests actually handled at once are bounded separately (dclr.serving.guard).
MAX_CONNECTIONS = 1024
# File descriptors kept free for the process's own files (model, index, logs) under the socket cap.
RESERVED_FDS = 64
# Seconds a client gets to send a complete request head (nginx's client_header_timeout is 60 s;
# a real client sends its headers in one packet, so 10 s only hurts stalled connections).
HEADER_TIMEOUT_S = 10.0
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
    b"connection: close\r\ncontent-length: %d\r\n\r\n%s"
)
_BUSY_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\nconnection: close\r\ncontent-length: %d\r\n\r\n%s"
)
# Open sockets one client address may hold (loopback included) before its new silent ones are
# shed (see GuardedH11Protocol).
MAX_CONNECTIONS_PER_CLIENT = 256
# Seconds a connection opened past a cap has to send its first byte before it is closed: a real
# client sends its request head at once.
GRACE_S = 1.0
# A connection that has received nothing for this long counts as idle (keep-alive between
# requests) and may be closed to make room at the hard cap.
IDLE_S = 1.0


def hard_cap(soft: int) -> int:
    """Sockets open at most: the soft cap plus room for new connections to show they are real."""
    return soft + max(16, soft // 8)


# Seconds an idle keep-alive connection is kept (uvicorn's default): frees slots of idle clients.
KEEP_ALIVE_S = 5
LISTEN_LINE = "dclr serve: listening on"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port).

    Created with proto IPPROTO_TCP, which asyncio reads on each accepted socket to turn Nagle's
    algorithm off (TCP_NODELAY): with proto 0 it leaves it on, and a response written in two
    small pieces (head, then body) waits for the client's delayed ACK, ~40 ms on Linux."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # uvicorn's default backlog
    sock.set_inheritable(True)
    return sock


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on a connection's socket (whoever created the listening socket): a small
    response goes out at once instead of waiting for the client's delayed ACK (see `bind`)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):  # the peer may already be gone
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request's head, caps on open
    connections in all and per client address, and JSON for every error it answers itself.

    A connection opened past a cap (`max_connections` in all, `max_per_client` from one address)
    is kept only if it sends a byte within GRACE_S; a silent one is then closed with a JSON 503
    and Retry-After. Past the hard cap (`hard_cap(max_connections)`, which bounds file
    descriptors) a new connection makes room by closing the oldest connection that never sent a
    byte, or else the one idle longest between keep-alive requests; only when every
    open connection is busy is the new one refused. A client that opens sockets and sends nothing
    therefore sheds its own sockets, and a real request, which sends its head at once, is served."""

    header_timeout_s = HEADER_TIMEOUT_S
    max_connections = MAX_CONNECTIONS
    max_per_client = MAX_CONNECTIONS_PER_CLIENT

    def __init__(self, config: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        size = config.h11_max_incomplete_event_size  # None: h11's default, as uvicorn does
        sizes = {} if size is None else {"max_incomplete_event_size": size}
        self.conn = FramingCheckedConnection(h11.SERVER, **sizes)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
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
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # the first bytes of the next request on this connection
        super().data_received(data)

    # ---- the connection caps ------------------------------------------------------------------
    def _open(self) -> list[Any]:
        return [c for c in self.connections if not c.transport.is_closing()]

    def _over_a_cap(self, open_: list[Any]) -> bool:
        same = sum(1 for c in open_ if getattr(c, "_peer", None) == self._peer)
        return len(open_) > self.max_connections or same > self.max_per_client

    def _make_room(self, open_: list[Any]) -> bool:
        """Keep the open connections within the hard cap; False when this one was refused."""
        if len(open_) <= hard_cap(self.max_connections):
            return True
        victim = _displaceable([c for c in open_ if c is not self])
        if victim is None:
            self._answer_busy("the server holds as many connections as it may")
            return False
        victim._answer_busy("closed to make room: this connection sent no request")
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
        from dclr.serving.middleware import error_json

        self._disarm_header_timer()
        if self._grace_timer is not None:
            self._grace_timer.cancel()
            self._grace_timer = None
        body = error_json(
            f"{why}; retry shortly", "server_overloaded", None, "too_many_connections"
        )
        self.transport.write(_BUSY_RESPONSE % (len(body), body))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """A request h11 cannot parse, or whose framing is ambiguous: JSON in the service's
        error shape, not plain text, and the connection closed (nothing after it is read)."""
        from dclr.serving.middleware import error_json

        problem = getattr(self.conn, "framing_problem", None)
        if problem is not None:
            body = error_json(f"ambiguous HTTP framing: {problem}", "invalid_request_error",
                              None, "ambiguous_framing")  # fmt: skip
        else:
            body = error_json(f"malformed HTTP request: {msg}", "invalid_request_error", None,
                              "bad_http_request")  # fmt: skip
        headers = [(b"content-type", b"application/json"), (b"connection", b"close"),
                   (b"content-length", b"%d" % len(body))]  # fmt: skip
        event = h11.Response(status_code=400, headers=headers, reason=b"Bad Request")
        for part in (event, h11.Data(data=body), h11.EndOfMessage()):
            try:
                self.transport.write(self.conn.send(part))
            except h11.LocalProtocolError:  # the connection is past sending a response
                break
        self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a complete request head arrived
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return  # a request is being handled: its body has its own deadline
        from dclr.serving.middleware import error_json

        body = error_json(
            f"the request head did not arrive within {self.header_timeout_s:g} s",
            "invalid_request_error",
            None,
            "header_timeout",
        )
        self.transport.write(_TIMEOUT_RESPONSE % (len(body), body))
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
            problem = ambiguous_framing(event)
            if problem is not None:
                self.framing_problem = problem
                raise h11.RemoteProtocolError(problem, error_status_hint=400)
        return event


def ambiguous_framing(request: h11.Request) -> str | None:
    """Why `request`'s body framing is ambiguous (RFC 9112 §6.1, §6.3), or None."""
    names = {name for name, _ in request.headers}  # h11 gives them lower-cased
    if b"transfer-encoding" not in names:
        return None
    if b"content-length" in names:
        return (
            "the request carries both Content-Length and Transfer-Encoding, so its body can be "
            "read two ways (RFC 9112 §6.1); send one of them"
        )
    if request.http_version == b"1.0":
        return (
            "an HTTP/1.0 request with Transfer-Encoding has no reliable framing "
            "(RFC 9112 §6.1); send HTTP/1.1, or Content-Length"
        )
    return None


def _displaceable(group: list[Any]) -> Any:
    """The connection to close for a new one: the oldest that never sent a byte, else the one
    idle longest between requests, else None (all are busy)."""
    now = time.monotonic()
    silent = [c for c in group if isinstance(c, GuardedH11Protocol) and c._received == 0]
    if silent:
        return min(silent, key=lambda c: c._opened)
    idle = [
        c
        for c in group
        if isinstance(c, GuardedH11Protocol)
        and c.conn.their_state is h11.IDLE
        and c.conn.our_state is h11.IDLE
        and now - c._last_data >= IDLE_S
    ]
    return min(idle, key=lambda c: c._last_data) if idle else None


def protocol_with(
    header_timeout_s: float,
    max_connections: int = MAX_CONNECTIONS,
    max_per_client: int = MAX_CONNECTIONS_PER_CLIENT,
) -> type[GuardedH11Protocol]:
    """GuardedH11Protocol with other limits (uvicorn takes a class)."""
    limits = {"header_timeout_s": header_timeout_s, "max_connections": max_connections,
              "max_per_client": min(max_per_client, max_connections)}  # fmt: skip
    return type("GuardedH11Protocol", (GuardedH11Protocol,), limits)


def socket_cap(wanted: int) -> int:
    """Raise the open-file limit towards `wanted` sockets; returns the cap that fits under it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = wanted + RESERVED_FDS
    if soft != resource.RLIM_INFINITY and soft < need:
        target = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - RESERVED_FDS))


def run(
    app: Any,
    host: str,
    port: int,
    max_connections: int = MAX_CONNECTIONS,
    header_timeout_s: float = HEADER_TIMEOUT_S,
    max_per_client: int = MAX_CONNECTIONS_PER_CLIENT,
) -> None:
    """Serve `app` until interrupted."""
    import uvicorn

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    cap = max_connections
    while cap > 1 and socket_cap(hard_cap(cap)) < hard_cap(cap):  # fit the open-file limit
        cap = max(1, cap * 3 // 4)
    config = uvicorn.Config(
        app,
        http=protocol_with(header_timeout_s, cap, max_per_client),
        log_level="warning",
        limit_concurrency=hard_cap(cap) + 1,  # never reached: the protocol keeps to hard_cap
        timeout_keep_alive=KEEP_ALIVE_S,
        access_log=False,
    )
    print(f"{LISTEN_LINE} http://{shown}:{bound_port}/", flush=True)
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])
