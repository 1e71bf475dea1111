"""Run an ASGI app with uvicorn on a socket we bind ourselves (so port 0 works and is reported).

The bound address is printed as `dclr serve: listening on http://HOST:PORT/` (flushed) before the
first request can arrive: scripts and tests read the port from that line.
"""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import Any

# Open connections at most; more get HTTP 503 from uvicorn. Each holds at most one request body
# (<= max_body_bytes), so this also bounds the memory held by requests in flight.
MAX_CONNECTIONS = 128
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


def run(app: Any, host: str, port: int, max_connections: int = MAX_CONNECTIONS) -> None:
    """Serve `app` until interrupted."""
    import uvicorn

    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    config = uvicorn.Config(
        app,
        log_level="warning",
        limit_concurrency=max_connections,
        timeout_keep_alive=KEEP_ALIVE_S,
        access_log=False,
    )
    print(f"{LISTEN_LINE} http://{shown}:{bound_port}/", flush=True)
    sys.stdout.flush()
    uvicorn.Server(config).run(sockets=[sock])
