"""From a request's texts to its answer, for the routes and the fast path: the texts through the
shared batcher (dropped from the queue if the client leaves), the embeddings body, the JSON
(orjson), and the answer when embedding fails."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
import orjson
from fastapi import Request
from fastapi.responses import Response

from dclr.serving.batcher import CannotFinishInTime, EmbeddingBatcher, Overloaded
from dclr.serving.errors import CLIENT_CLOSED, error_response
from dclr.serving.fastpath import Handle
from dclr.serving.headers import client_timeout_s
from dclr.serving.limits import LimitError, check_texts
from dclr.serving.settings import Limits

JSON = "application/json"


def json_response(body: dict[str, Any]) -> Response:
    """JSON by orjson: numpy arrays serialised in C, without a Python list of floats in between.
    A 64 x 384 float32 response (this CPU, one run): 21.0 ms and 510 kB by `json.dumps` of
    `.tolist()`, 0.7 ms and 271 kB here (float32's shortest repr: it reads back to the same
    float32)."""
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), media_type=JSON)


def embeddings_body(
    vectors: np.ndarray, tokens: np.ndarray, encoding_format: str, model_name: str
) -> dict[str, Any]:
    """/v1/embeddings' answer (OpenAI's shape) for one request's vectors and token counts."""
    if encoding_format == "base64":
        values: Sequence[Any] | np.ndarray = [
            base64.b64encode(v.astype("<f4").tobytes()).decode() for v in vectors
        ]
    else:
        values = vectors  # rows serialised straight from numpy (float32, shortest repr)
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(values)]
    total = int(tokens.sum())
    return {
        "object": "list",
        "data": data,
        "model": model_name,
        "usage": {"prompt_tokens": total, "total_tokens": total},
    }


def shorten(vectors: np.ndarray, dims: int) -> np.ndarray:
    """Unit vectors (n, d) -> their first `dims` components, made unit length again: OpenAI's
    `dimensions` and sentence-transformers' `truncate_dim` then `normalize_embeddings`. Meant for
    models trained to keep their meaning up front (Matryoshka); others lose quality."""
    head = np.ascontiguousarray(vectors[:, :dims], dtype=np.float32)
    norms = np.linalg.norm(head, axis=1, keepdims=True)
    return head / np.maximum(norms, np.finfo(np.float32).tiny)


Embed = Callable[[list[str], Request], Awaitable[tuple[np.ndarray, np.ndarray]]]


def embed_error_response(err: Exception) -> Response:
    """The answer when a request's texts could not be embedded: the queue is full (503 with
    Retry-After), the client went away (499, which nobody reads: it ends the cycle quietly) or
    the encoder failed on them (500). The route's handlers and the fast path both use it."""
    if isinstance(err, Overloaded):
        return error_response("queue_full", str(err), headers={"Retry-After": str(err.retry_after)})
    if isinstance(err, CannotFinishInTime):  # no Retry-After: the same request never fits
        return error_response("cannot_finish_in_time", str(err))
    if isinstance(err, ClientGone):
        return Response(status_code=CLIENT_CLOSED)
    return error_response("encode_failed", str(err))


def embedder(batcher: EmbeddingBatcher) -> Embed:
    """A request's texts through the shared batcher, dropped from the queue if its client goes."""

    async def embed(texts: list[str], raw: Request) -> tuple[np.ndarray, np.ndarray]:
        """This request's (vectors, token counts); dropped from the queue if its client leaves."""
        job = asyncio.ensure_future(batcher.submit(texts, client_timeout_s(raw.headers)))
        gone = asyncio.ensure_future(_disconnected(raw))
        try:
            await asyncio.wait({job, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not job.done():
                job.cancel()  # the client went away: free its place in the queue
        if not job.done() or job.cancelled():
            raise ClientGone
        try:
            vectors, tokens = job.result()  # (n, d) unit vectors, (n,) token counts
        except (Overloaded, CannotFinishInTime):
            raise
        except Exception as err:  # noqa: BLE001 - this request's texts broke the encoder
            raise EncodeFailed(
                f"the encoder failed on this request's texts ({type(err).__name__}: {err})"
            ) from err
        return vectors, tokens

    return embed


def fast_embeddings(limits: Limits, embed: Embed, model_name: str) -> Handle:
    """`FastEmbeddings`' handler: the route's work for a request whose body needs no model; False
    (nothing sent) when its texts break a limit, so the route answers that as it always did."""

    async def handle(scope: dict[str, Any], receive: Any, send: Any, texts: list[str],
                     encoding_format: str) -> bool:  # fmt: skip
        try:
            check_texts(limits, texts, "input")
        except LimitError:
            return False
        try:
            vectors, tokens = await embed(texts, Request(scope, receive))
            response = json_response(embeddings_body(vectors, tokens, encoding_format, model_name))
        except (Overloaded, CannotFinishInTime, ClientGone, EncodeFailed) as err:
            response = embed_error_response(err)
        await response(scope, receive, send)
        return True

    return handle


class EncodeFailed(Exception):
    """The encoder raised on this request's own texts (HTTP 500; other requests are unaffected)."""


class ClientGone(Exception):
    """The client disconnected before its vectors were ready; nothing is sent."""


async def _disconnected(request: Request) -> None:
    """Return once the client has gone away (the body is already read, so only that can come)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
