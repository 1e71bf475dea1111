"""Every error `dclr serve` answers, and the one place its JSON is built.

An error is JSON in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`. `ERRORS`
lists every `code` the server sends with its HTTP status and `type`; three builders send one, each
for a layer that answers errors its own way:

- `error_response`: a Starlette `Response` (the routes, their exception handlers, the fast path);
- `send_error`: straight to an ASGI `send` (the middleware: body limit, Host/API-key guard,
  requests in flight);
- `raw_error`: the bytes of a whole HTTP/1.1 response that closes the connection (the protocols,
  answering before any request exists: slow headers, too many sockets, malformed HTTP).

Two answers carry a code that is not fixed: a malformed request (422, `validation_response`: the
code is pydantic's error type, such as `missing` or `json_invalid`) and an HTTP error raised by
the framework (`http_error_response`: its own status, no code). A client that went away gets
status 499 and no body (`CLIENT_CLOSED`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from starlette.responses import Response

INVALID = "invalid_request_error"
OVERLOADED = "server_overloaded"
SERVER = "server_error"
JSON = "application/json"
# nginx's status for "client closed the request" (never seen by the client, which is gone).
CLIENT_CLOSED = 499


@dataclass(frozen=True)
class Error:
    """What an error code means: its HTTP status, OpenAI's error `type`, and the `param` it
    always names (None: the sender says, or none)."""

    status: int
    type: str
    param: str | None = None


ERRORS: dict[str, Error] = {
    # the connection, before a request exists (dclr.serving.protocols)
    "header_timeout": Error(408, INVALID),
    "too_many_connections": Error(503, OVERLOADED),
    "ambiguous_framing": Error(400, INVALID),
    "bad_http_request": Error(400, INVALID),
    # the request body (dclr.serving.middleware)
    "bad_length": Error(400, INVALID, "body"),
    "body_too_large": Error(413, INVALID, "body"),
    "body_too_slow": Error(408, INVALID, "body"),
    "unsupported_media_type": Error(415, INVALID, "body"),
    "body_timeout": Error(408, INVALID, "body"),
    # who may ask, and how many at once (dclr.serving.guard)
    "host_not_allowed": Error(421, INVALID),
    "invalid_api_key": Error(401, "authentication_error"),
    "too_many_requests_in_flight": Error(503, OVERLOADED),
    # the request's texts and numbers (dclr.serving.limits, the embeddings route)
    "empty_input": Error(400, INVALID),
    "too_many_texts": Error(400, INVALID),
    "text_too_long": Error(400, INVALID),
    "empty_text": Error(400, INVALID),
    "invalid_unicode": Error(400, INVALID),
    "k_out_of_range": Error(400, INVALID),
    "unsupported_dimensions": Error(400, INVALID),
    # the routes (dclr.serving.service)
    "no_index": Error(404, INVALID),
    "queue_full": Error(503, OVERLOADED),
    "cannot_finish_in_time": Error(413, INVALID, "input"),
    "encode_failed": Error(500, SERVER),
    "internal_error": Error(500, SERVER),
}


def error_json(message: str, type_: str, param: str | None, code: str | None) -> bytes:
    """The body of every error the service sends."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return json.dumps(body).encode()


def error_body(code: str, message: str, param: str | None = None) -> bytes:
    """The JSON of error `code` (one of `ERRORS`) with this message."""
    kind = ERRORS[code]
    return error_json(message, kind.type, param or kind.param, code)


def error_response(
    code: str, message: str, param: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    """Error `code` as a Starlette response (routes, exception handlers, the fast path)."""
    body = error_body(code, message, param)
    response = Response(body, status_code=ERRORS[code].status, media_type=JSON)
    for name, value in (headers or {}).items():
        response.headers[name] = value  # after content-length and content-type, as ever
    return response


def validation_response(message: str, param: str | None, code: str | None) -> Response:
    """422 for a request the schema refused; `code` is pydantic's error type."""
    return Response(error_json(message, INVALID, param, code), status_code=422, media_type=JSON)


def http_error_response(status: int, message: str) -> Response:
    """An HTTP error without a code of its own (405 for a wrong method, 404 for a path that is
    not served), as JSON."""
    return Response(error_json(message, INVALID, None, None), status_code=status, media_type=JSON)


async def send_error(
    send: Any, code: str, message: str, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Error `code` straight to an ASGI `send` (the middleware), with any extra headers."""
    body = error_body(code, message)
    start = [(b"content-type", JSON.encode()), (b"content-length", b"%d" % len(body))]
    status = ERRORS[code].status
    await send({"type": "http.response.start", "status": status, "headers": start + [*headers]})
    await send({"type": "http.response.body", "body": body})


def closing_headers(
    body: bytes, headers: Sequence[tuple[bytes, bytes]] = ()
) -> list[tuple[bytes, bytes]]:
    """The headers of an error answer that closes the connection (a protocol's own answers)."""
    return [(b"content-type", JSON.encode()), *headers, (b"connection", b"close"),
            (b"content-length", b"%d" % len(body))]  # fmt: skip


def raw_error(code: str, message: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> bytes:
    """Error `code` as a whole HTTP/1.1 response that closes the connection (the protocols)."""
    body = error_body(code, message)
    status = HTTPStatus(ERRORS[code].status)
    head = [b"HTTP/1.1 %d %s" % (status.value, status.phrase.encode())]
    head += [b"%s: %s" % header for header in closing_headers(body, headers)]
    return b"\r\n".join(head) + b"\r\n\r\n" + body
