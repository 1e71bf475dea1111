"""Run an ASGI app with uvicorn on a socket we bind ourselves (so port 0 works and is reported).

The bound address is printed as `dclr serve: listening on http://HOST:PORT/` (flushed) before the
first request can arrive: scripts and tests read the port from that line.

Slow clients: uvicorn bounds the idle time between keep-alive requests but not the time a client
takes to send a request's headers, so connections that send a partial header and stall (slowloris)
stay open for ever, and uvicorn's concurrency limit counts them. `GuardedH11Protocol` adds that
bound: a connection that has not sent a complete request head within `header_timeout_s` of its
first byte (or of opening) gets 408 and is closed. The limit on requests handled at once lives in
`dclr.serving.guard` and counts requests, not connections; uvicorn's own limit is only a cap on
open sockets. Facing the internet, run behind a reverse proxy all the same (docs/serving.md).
"""

from __future__ import annotations

import asyncio
import ipaddress
import resource
import socket
import sys
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
    """A listening TCP socket on host:port (port 0: any free port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # uvicorn's default backlog
    sock.set_inheritable(True)
    return sock


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on receiving each request's head."""

    header_timeout_s = HEADER_TIMEOUT_S

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self.conn.their_state is h11.IDLE:
            self._arm_header_timer()  # the first bytes of the next request on this connection
        super().data_received(data)

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


def protocol_with(header_timeout_s: float) -> type[GuardedH11Protocol]:
    """GuardedH11Protocol with another header deadline (uvicorn takes a class)."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"header_timeout_s": header_timeout_s})


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
) -> None:
    """Serve `app` until interrupted."""
    import uvicorn

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    config = uvicorn.Config(
        app,
        http=protocol_with(header_timeout_s),
        log_level="warning",
        limit_concurrency=socket_cap(max_connections),
        timeout_keep_alive=KEEP_ALIVE_S,
        access_log=False,
    )
    print(f"{LISTEN_LINE} http://{shown}:{bound_port}/", flush=True)
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])
