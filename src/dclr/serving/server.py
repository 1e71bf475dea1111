"""Run an ASGI app with uvicorn on a socket we bind ourselves (so port 0 works and is reported).

The bound address is printed as `dclr serve: listening on http://HOST:PORT/` (flushed) before the
first request can arrive: scripts and tests read the port from that line.

The HTTP protocol (httptools or h11) and its guard against slow clients, socket floods and
ambiguous framing are in `dclr.serving.protocols`; the event loop is uvloop when installed
(uvicorn's `loop="auto"`). The limit on requests handled at once lives in `dclr.serving.guard`
and counts requests whose body has fully arrived, not connections. Facing the internet, run
behind a reverse proxy all the same (docs/serving.md).
"""

from __future__ import annotations

import copy
import math
import resource
import socket
import sys
from dataclasses import replace
from typing import Any

from dclr.serving.protocols import hard_cap, protocol_with
from dclr.serving.settings import EVENT_LOOPS, Connections

# File descriptors kept free for the process's own files (model, index, logs) under the socket cap.
RESERVED_FDS = 64
# Seconds an idle keep-alive connection is kept (uvicorn's default): frees slots of idle clients.
KEEP_ALIVE_S = 5
LISTEN_LINE = "dclr serve: listening on"


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


def event_loop(wanted: str = "auto") -> str:
    """The event loop uvicorn is to run: "uvloop" or "asyncio" ("auto": uvloop when installed,
    as uvicorn's own "auto" does, but said here so a missing uvloop is an error, not a silent
    fallback, when it was asked for)."""
    if wanted not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {wanted!r}: use auto, asyncio or uvloop")
    if wanted == "asyncio":
        return wanted
    try:
        import uvloop  # noqa: F401
    except ImportError:
        if wanted == "uvloop":
            raise ValueError(
                "--loop uvloop needs uvloop: pip install 'dclr[serve]' (not on Windows)"
            ) from None
        return "asyncio"
    return "uvloop"


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


def log_config() -> dict[str, Any]:
    """uvicorn's logging set-up with its own messages at WARNING (no start-up chatter: the
    listening line above says where the server is) and its access log (one line per answered
    request, when `--access-log`) at INFO, on stdout, each line with its time."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["uvicorn"]["level"] = "WARNING"
    config["loggers"]["uvicorn.error"]["level"] = "WARNING"
    config["loggers"]["uvicorn.access"]["level"] = "INFO"
    access = config["formatters"]["access"]
    access["fmt"] = "%(asctime)s " + access["fmt"]  # when, too
    return config


def preflight(connections: Connections) -> None:
    """Raise ValueError now, before a model loads, when the parser or event loop asked for is
    not installed (what `run` would find only after loading)."""
    protocol_with(connections)
    event_loop(connections.loop)


def run(app: Any, connections: Connections) -> None:
    """Serve `app` until interrupted on `connections.host`:`port`, with its parser (see
    `protocols.protocol_with`) and event loop ("uvloop", "asyncio" or "auto": uvloop when
    installed)."""
    import uvicorn

    cap = connections.max_connections
    while cap > 1 and socket_cap(hard_cap(cap)) < hard_cap(cap):  # fit the open-file limit
        cap = max(1, cap * 3 // 4)
    protocol = protocol_with(replace(connections, max_connections=cap))  # before binding
    loop = event_loop(connections.loop)
    sock = bind(connections.host, connections.port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    config = uvicorn.Config(
        app,
        http=protocol,
        loop=loop,
        log_config=log_config(),
        log_level=None,  # the levels are log_config's
        # none of uvicorn's own: the protocol keeps connections to hard_cap. uvicorn's check
        # also counts request tasks, which outlive their closed connections for a moment: under
        # 1,300 trickled bodies it answered good requests a plain-text 503 (issue 47 point 2)
        limit_concurrency=None,
        timeout_keep_alive=KEEP_ALIVE_S,
        # a bounded drain on SIGTERM (uvicorn takes whole seconds)
        timeout_graceful_shutdown=math.ceil(connections.drain_timeout),
        access_log=connections.access_log,
    )
    print(f"{LISTEN_LINE} http://{shown}:{bound_port}/", flush=True)
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])
