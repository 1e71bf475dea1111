"""JSON only: a request with a body on a JSON route must say `Content-Type: application/json`.

Every POST route of `dclr serve` reads JSON. A browser lets any web page send a cross-origin
POST without asking first (no CORS preflight) when its body is `text/plain`, a form or multipart,
or has no type at all; such a request reaches a keyless server on the user's machine and makes it
encode. With the type checked here, for the route and the fast path alike, those requests get
415 before their body is read, and a page that sends `application/json` must first pass a
preflight, which `dclr serve` never approves (it sends no `Access-Control-Allow-*` header; see
docs/serving.md, "Cross-origin calls").
"""

from __future__ import annotations

from typing import Any

from dclr.serving.errors import send_error

# Methods whose requests carry a body the routes read.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_json(content_type: bytes | None) -> bool:
    """`application/json` or a `+json` type, parameters (charset) allowed, any case."""
    if not content_type:
        return False
    kind = content_type.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (
        kind.startswith(b"application/") and kind.endswith(b"+json")
    )


class JsonOnlyMiddleware:
    """Wrap an ASGI app: a body-carrying request that is not JSON gets 415, unread."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in BODY_METHODS:
            content_type = dict(scope.get("headers") or []).get(b"content-type")
            if not is_json(content_type):
                found = "none" if content_type is None else content_type.decode("latin-1")[:100]
                await send_error(
                    send,
                    "unsupported_media_type",
                    f"this route reads JSON: send Content-Type: application/json (got {found})",
                )
                return
        await self.app(scope, receive, send)
