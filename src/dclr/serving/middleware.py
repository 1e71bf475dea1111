"""ASGI middleware that refuses request bodies over a byte limit, before and while reading them.

A declared `Content-Length` over the limit is answered 413 without reading a byte; a body sent
without one (chunked) is counted as it arrives and cut off at the limit, so no more than
`max_bytes` of a body is ever held. The answer is a JSON
error in OpenAI's shape naming the limit. A body that does not arrive in full within `timeout_s`,
or that after `grace_s` arrives slower than `min_rate` bytes/s on average (a client trickling
bytes to hold a connection), is answered 408.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dclr.serving.errors import send_error

# Seconds a client gets to send its whole body: 4 MiB at a slow 1 Mbit/s link takes ~35 s.
BODY_TIMEOUT_S = 60.0
# The body-rate floor: after BODY_GRACE_S, a body must keep arriving at MIN_BODY_RATE bytes/s on
# average (a 1 Mbit/s link sends 128 KB/s), so one byte every few seconds cannot hold a socket
# for the whole BODY_TIMEOUT_S.
MIN_BODY_RATE = 1024
BODY_GRACE_S = 5.0

# An answer sent before the whole body arrived closes the connection: the rest of the body would
# otherwise be read as the next request, and a trickling client would keep its socket (issue 47:
# 1,152 of 1,300 such sockets still open after their 408, shutting good clients out at the cap).
CLOSE = ((b"connection", b"close"),)

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyLimitMiddleware:
    """Wrap an ASGI app; bodies over `max_bytes` get HTTP 413."""

    def __init__(
        self,
        app: Any,
        max_bytes: int,
        timeout_s: float = BODY_TIMEOUT_S,
        min_rate: float = MIN_BODY_RATE,
        grace_s: float = BODY_GRACE_S,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.min_rate = min_rate
        self.grace_s = grace_s

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await send_error(send, "bad_length", "Content-Length is not a number", CLOSE)
                return
            if size > self.max_bytes:
                await send_error(send, "body_too_large", self._message(f"{size} bytes"), CLOSE)
                return
        # Read the whole body (it is bounded) so an overflow is answered here, not turned into a
        # parsing error by the framework; the app then reads the buffered copy.
        chunks: list[bytes] = []
        received = 0
        start = time.monotonic()
        deadline = start + self.timeout_s
        while True:
            # the next byte is due when the average since the grace period would fall below
            # the floor, and in any case by the total deadline
            due = start + self.grace_s + (received + 1) / self.min_rate
            try:
                message = await asyncio.wait_for(receive(), min(deadline, due) - time.monotonic())
            except TimeoutError:
                if due < deadline:
                    text = (f"the request body arrives slower than {self.min_rate:g} bytes/s "
                            f"({received} bytes in {time.monotonic() - start:.1f} s)")  # fmt: skip
                    await send_error(send, "body_too_slow", text, CLOSE)
                else:
                    text = f"the request body did not arrive within {self.timeout_s:g} s"
                    await send_error(send, "body_timeout", text, CLOSE)
                return
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_bytes:
                text = self._message(f"more than {self.max_bytes} bytes")
                await send_error(send, "body_too_large", text, CLOSE)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the disconnect, as usual

        await self.app(scope, replay, send)

    def _message(self, size: str) -> str:
        return (
            f"request body is {size}; the limit is {self.max_bytes} bytes (max_body_bytes): "
            "send fewer or shorter texts per request"
        )
