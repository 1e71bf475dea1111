"""POST /v1/embeddings without FastAPI's routing and request model, for well-formed requests.

Under 32 one-text clients the event loop spent ~0.9 ms per request, about half of it in FastAPI's
and Starlette's layers (py-spy, docs/performance.md), while the model waited ~25 % of the time
for the next requests to come through. `FastEmbeddings` sits innermost among the service's
middleware (after the guard, the body limit and the in-flight slot) and answers a request whose
body parses (orjson) to what `EmbeddingsRequest` accepts without any coercion: `input` a string or
a list of strings, `model` a string or null, `encoding_format` "float" or "base64", no
`dimensions`, other keys ignored (as the model ignores them). Everything else (malformed JSON,
other types, `dimensions`, texts that break a limit: `handle` returns False before it sends
anything) goes on to the FastAPI route with the body replayed, which answers it as it always did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, get_args

import orjson

from dclr.serving.schemas import EmbeddingsRequest

PATH = "/v1/embeddings"
# How the fast path treats each field of `EmbeddingsRequest`; a field it does not list would be
# silently ignored here while the route reads it, so tests/serving/test_fastpath.py fails when
# the model gains one. "declined": a body that has it goes to the route.
FIELDS = {
    "input": "texts",
    "model": "checked",
    "encoding_format": "format",
    "dimensions": "declined",
}
DECLINED = tuple(name for name, how in FIELDS.items() if how == "declined")
FORMATS = get_args(EmbeddingsRequest.model_fields["encoding_format"].annotation)
Handle = Callable[[dict[str, Any], Any, Any, list[str], str], Awaitable[bool]]


def parse_request(body: bytes) -> tuple[list[str], str] | None:
    """(texts, encoding_format) of a body that needs no validation beyond this, else None."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or any(name in data for name in DECLINED):
        return None
    text = data.get("input")
    if type(text) is str:
        texts = [text]
    elif type(text) is list and all(type(t) is str for t in text):
        texts = text
    else:
        return None
    model = data.get("model")
    fmt = data.get("encoding_format", "float")
    if (model is not None and type(model) is not str) or fmt not in FORMATS:
        return None
    return texts, fmt


class FastEmbeddings:
    """ASGI middleware: well-formed POST /v1/embeddings -> `handle`, the rest -> `app`."""

    def __init__(self, app: Any, handle: Handle) -> None:
        self.app = app
        self.handle = handle

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != PATH or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        first = await receive()  # the body limit upstream replays the whole body at once
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        parsed = None
        if first.get("type") == "http.request" and not first.get("more_body", False):
            parsed = parse_request(first.get("body", b""))
        # the handler reads on from `receive` (only the disconnect can come); when it declines it
        # has read and sent nothing, and the route gets the body replayed
        if parsed is not None and await self.handle(scope, receive, send, *parsed):
            return
        await self.app(scope, replay, send)
