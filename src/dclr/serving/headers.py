"""HTTP headers the service reads and sends, other than the errors' (`dclr.serving.errors`): the
timeout a client says it will wait, and the security headers of the page and of `/docs`."""

from __future__ import annotations

import math
from typing import Any

# The page loads only its own files and talks only to this server.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
# Headers in which a client says how long it will wait, in seconds: OpenAI's Python client sends
# x-stainless-timeout; X-Request-Timeout is for everyone else. A request the queue could not
# finish within TIMEOUT_SHARE of it is refused at once (503, Retry-After) instead of timing out.
TIMEOUT_HEADERS = ("x-request-timeout", "x-stainless-timeout")
TIMEOUT_SHARE = 0.8


def client_timeout_s(headers: Any) -> float | None:
    """The queue-wait bound a client's timeout header asks for, or None (absent or unusable)."""
    for name in TIMEOUT_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value)
        except ValueError:
            continue
        if math.isfinite(seconds) and seconds > 0:
            return seconds * TIMEOUT_SHARE
    return None


# /docs (with `dclr serve --docs`): Swagger UI's files come from this CDN, its page has one inline
# script; nothing else may load, and the page may not be framed.
DOCS_CDN = "https://cdn.jsdelivr.net"
DOCS_HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'self'; script-src {DOCS_CDN} 'unsafe-inline'; style-src {DOCS_CDN}; "
        "img-src 'self' data: https://fastapi.tiangolo.com; connect-src 'self'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}
