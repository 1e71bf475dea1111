"""Who may talk to the service: the Host allow-list, the optional API key, requests in flight.

`GuardMiddleware` wraps the ASGI app and checks 1 and 2 before the request body is read; 3 is
counted once the body has arrived:

1. Host: with an allow-list (the default for a loopback bind: localhost, 127.0.0.1, ::1), a request
   whose `Host` header names another host is refused with 421. This defeats DNS rebinding, where a
   web page from evil.example re-points its own name at 127.0.0.1 and reads the service from the
   victim's browser: the browser then sends `Host: evil.example`.
2. API key: when one is set, every route except the static page needs `Authorization: Bearer KEY`
   (what the OpenAI client sends) or `X-API-Key: KEY`; a missing or wrong key gets 401. Keys are
   compared in constant time (`hmac.compare_digest`).
3. Requests in flight (`InFlightMiddleware`, after the body has been read): past `max_in_flight`
   requests being handled at once, new ones get 503 with Retry-After. Connections still sending
   their headers or their body do not count (the server's header deadline and the body-rate floor
   close them), so slow clients cannot take the slots of real requests.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Iterable
from typing import Any

from dclr.serving.errors import send_error
from dclr.serving.settings import MAX_IN_FLIGHT, Security

# Routes served without the API key: the page and its files hold no data and no secret.
PUBLIC_PATHS = frozenset({"/", "/favicon.ico", "/static/app.js", "/static/app.css"})
# Seconds a client refused for too many requests in flight is told to wait.
BUSY_RETRY_AFTER_S = 1

_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::(?P<port>[0-9]{1,5}))?")


def host_name(header: bytes) -> str:
    """The host part of a Host header: 'a.example:8000' -> 'a.example', '[::1]:80' -> '::1'.

    Parsed strictly (RFC 9110 host[:port]): anything else, such as '127.0.0.1:80@evil.com' or
    '[::1]evil.com', gives '' and is not on any allow-list."""
    text = header.decode("latin-1").strip().lower()
    match = _HOST.fullmatch(text)
    if match is None:
        try:  # a bare IPv6 address without brackets, as some clients send it
            return str(ipaddress.IPv6Address(text))
        except ValueError:
            return ""
    return match.group("v6") or match.group("name")


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    for name, value in headers:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return value[7:].strip()
        if name == b"x-api-key":
            return value.strip()
    return None


class GuardMiddleware:
    """Wrap an ASGI app with the checks of the module docstring."""

    def __init__(self, app: Any, security: Security) -> None:
        self.app = app
        self.security = security
        self.allowed = None
        if security.allowed_hosts is not None:
            self.allowed = {h.strip("[]").lower() for h in security.allowed_hosts}
        self.key = security.api_key.encode() if security.api_key else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if self.allowed is not None:
            host = next((v for k, v in headers if k == b"host"), b"")
            if host_name(host) not in self.allowed:
                shown = host.decode("latin-1")[:100]
                await send_error(
                    send,
                    "host_not_allowed",
                    f"this server does not answer to Host {shown!r}; allowed: "
                    f"{', '.join(sorted(self.allowed))} (start it with --allowed-host NAME to add "
                    "one)",
                )
                return
        if self.key is not None and scope.get("path") not in PUBLIC_PATHS:
            given = presented_key(headers)
            if given is None or not hmac.compare_digest(given, self.key):
                await send_error(
                    send,
                    "invalid_api_key",
                    "missing or wrong API key: send the header 'Authorization: Bearer KEY'",
                    [(b"www-authenticate", b"Bearer")],
                )
                return
        await self.app(scope, receive, send)


class InFlightMiddleware:
    """Past `max_in_flight` requests being handled at once, new ones get 503 with Retry-After.

    It sits inside `BodyLimitMiddleware`, which reads (and bounds) the whole body first, so a
    request takes a slot only once it has fully arrived: clients trickling their bodies hold
    sockets (bounded by the body-rate floor), never the slots of complete requests."""

    def __init__(self, app: Any, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self.app = app
        self.max_in_flight = max_in_flight
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.in_flight >= self.max_in_flight:
            await send_error(
                send,
                "too_many_requests_in_flight",
                f"{self.in_flight} requests are already being handled (max_in_flight); retry "
                "shortly",
                [(b"retry-after", str(BUSY_RETRY_AFTER_S).encode())],
            )
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1
