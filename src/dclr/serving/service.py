"""The embeddings HTTP service: a FastAPI app around one encoder (and optionally one index).

Routes: `POST /v1/embeddings` (OpenAI-compatible), `POST /similarity` (pairs -> cosines, or
sentences -> cosine matrix), `POST /search` (when an index is loaded), `GET /health`, the web page
at `/` (with `/static/app.js`, `/static/app.css`), FastAPI's `/openapi.json`, and `/docs` only
with `--docs`.
Vectors are L2-normalised, so a dot product is a cosine. Every error is JSON in OpenAI's shape
(`{"error": {"message", "type", "param", "code"}}`): 400 for a broken limit or invalid text (the
message names the field), 401 without the API key (when one is set), 408 for a body that does not
arrive in time, 413 for an oversized body, 421 for a Host not on the allow-list, 422 for a
malformed request, 404 when no index is loaded, 500 when the encoder fails on this request's own
texts (requests batched with it are not affected), 503 when the queue is full (with Retry-After).
A request whose client disconnects while queued is dropped without being encoded.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, replace
from importlib import resources
from typing import Any

import numpy as np
import orjson
import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from dclr.indexing.fingerprint import SHORT
from dclr.indexing.index import SearchIndex
from dclr.indexing.memory import trim_heap
from dclr.models.encoder import SentenceEncoder, model_limit
from dclr.serving.batcher import EmbeddingBatcher, EncodeIds, Overloaded, Tokenize
from dclr.serving.fastpath import FastEmbeddings, Handle
from dclr.serving.guard import GuardMiddleware, InFlightMiddleware
from dclr.serving.limits import LimitError, check_k, check_texts
from dclr.serving.middleware import BodyLimitMiddleware, error_json
from dclr.serving.schemas import (
    EmbeddingsRequest,
    EmbeddingsResponse,
    ErrorResponse,
    HealthResponse,
    SearchRequest,
    SearchResponse,
    SimilarityRequest,
    SimilarityResponse,
)
from dclr.serving.settings import Limits, ServeSettings

JSON = "application/json"
# Encoded (twice, unmeasured) before the first request: a short and a longer text.
WARM_UP = ["warm up", "a longer sentence to warm up the model before the first request " * 4]
# When this process started serving: /v1/models's `created` (seconds since the epoch).
STARTED = int(time.time())
# The page's files, served from the package; nothing else under /static is reachable.
STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
# The page loads only its own files and talks only to this server.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}
# Validation problems listed in one error message: the first few are enough to fix a request.
MAX_PROBLEMS = 5
# FAISS threads: a request searches one query, which one thread does fastest; more OpenMP
# threads would only spin against the encoder's own threads in this process.
SEARCH_THREADS = 1
# Passes under this many tokens (a query of a few texts) run the model on one intra-op thread.
# Measured on the 2-core EPYC (benchmarks/serve_vs_peer.py, dclr only, c1x1 = sequential
# one-text requests): p50 20.2 ms and 26.6 CPU s / 1,000 texts with 2 threads, 16.1 ms and 17.0 s
# with 1; a forward of <= 60 tokens takes the same time on 1 or 2 threads in isolation. Larger
# passes keep every thread: with one, 32 clients x 1 text fell from 194 to 137 texts/s.
ONE_THREAD_BELOW_TOKENS = 128
# nginx's status for "client closed the request" (never seen by the client, which is gone).
CLIENT_CLOSED = 499
ERRORS: dict[int | str, dict[str, Any]] = {  # FastAPI's `responses` type
    400: {"model": ErrorResponse, "description": "A limit was broken (the message names it)."},
    401: {"model": ErrorResponse, "description": "Missing or wrong API key (when one is set)."},
    413: {"model": ErrorResponse, "description": "Request body over max_body_bytes."},
    422: {"model": ErrorResponse, "description": "Malformed request."},
    500: {"model": ErrorResponse, "description": "The encoder failed on this request's texts."},
    503: {"model": ErrorResponse, "description": "Queue full; retry after Retry-After seconds."},
}


def default_encode_workers(encoder: SentenceEncoder) -> int:
    """Passes to encode at once: two on a CPU with two or more intra-op threads (each pass on
    half of them), one on a GPU.

    Two one-thread passes on two cores beat one two-thread pass when requests keep arriving:
    the event loop that parses them takes a core now and then, and a two-thread pass then
    waits at every parallel region for the thread it displaced, while an independent pass
    only loses the time taken (docs/performance.md, "Serving against infinity-emb")."""
    on_cpu = next(encoder.parameters()).device.type == "cpu"
    return 2 if on_cpu and torch.get_num_threads() >= 2 else 1


def pass_threads(tokens: int, threads: int) -> int:
    """Intra-op threads for a pass of `tokens` tokens: one below `ONE_THREAD_BELOW_TOKENS`.

    A pass that small gains nothing from a second thread (its matrices are too small to split
    well), and the threads it would wake compete with the event loop, which parses, validates and
    answers requests on the same cores."""
    return 1 if tokens < ONE_THREAD_BELOW_TOKENS else threads


def encoder_functions(encoder: SentenceEncoder, workers: int = 1) -> tuple[Tokenize, EncodeIds]:
    """The batcher's two halves: texts -> token ids (truncated where the model truncates, as
    bulk encoding does), and token ids -> (unit vectors (n, d) float32,).

    A pass is encoded as `SentenceEncoder.encode` encodes a corpus: longest first and packed
    (padding-free) when the encoder packs, so a served vector is the bulk-encoded vector of the
    same text, whatever its batch-mates. With `workers` passes at once, each runs on its share
    of the process's intra-op threads."""
    limit = encoder.max_length or model_limit(encoder.tokenizer)
    pooler = encoder.eval_pooler or encoder.pooler

    def tokenize(texts: list[str]) -> list[list[int]]:
        return encoder.tokenizer(texts, truncation=True, max_length=limit)["input_ids"]

    threads = max(1, torch.get_num_threads() // workers)  # the process's setting, shared

    def encode(ids: list[list[int]]) -> tuple[np.ndarray]:
        want = pass_threads(sum(len(x) for x in ids), threads)
        if torch.get_num_threads() != want:  # ~1.5 us; only when a pass crosses the line
            torch.set_num_threads(want)
        vectors = encoder.encode_ids_poolers(ids, (pooler,), batch_size=len(ids), normalize=True)
        trim_heap()  # see dclr.indexing.memory: keeps resident memory flat across shapes
        return (vectors[pooler],)

    return tokenize, encode


def describe_validation(problems: Sequence[dict]) -> tuple[str, str | None, str | None]:
    """FastAPI's validation errors -> (message, offending field, code) people can act on."""
    if not problems:
        return "malformed request", None, None
    first = problems[0]
    if first.get("type") == "json_invalid":
        position = first.get("loc", (None, "?"))[-1]
        return f"request body is not valid JSON (at character {position})", "body", "json_invalid"
    parts: list[str] = []
    for problem in problems:
        # Union members appear in `loc` as type tags ('str', 'list[str]'): keep only field names
        # and list positions.
        path = [str(p) for p in problem.get("loc", ())[1:] if not _is_type_tag(p)]
        text = f"{'.'.join(path) or 'body'}: {problem.get('msg')}"
        if text not in parts:
            parts.append(text)
    field = next((str(p) for p in first.get("loc", ())[1:2]), None)
    if field == "input" and first.get("type") in ("string_type", "list_type"):
        parts = ["input must be a string or a list of strings (token-id input is not supported)"]
    return "; ".join(parts[:MAX_PROBLEMS]), field, first.get("type")


def _is_type_tag(part: object) -> bool:
    return isinstance(part, str) and (part in ("str", "int", "float", "bool") or "[" in part)


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


def _add_docs(app: FastAPI) -> None:
    from fastapi.openapi.docs import get_swagger_ui_html

    @app.get("/docs", include_in_schema=False)
    async def _docs() -> Response:
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")
        page.headers.update(DOCS_HEADERS)
        return page


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


def _error(status: int, message: str, type_: str, param: str | None, code: str | None) -> Response:
    return Response(
        error_json(message, type_, param, code), status_code=status, media_type="application/json"
    )


def create_app(
    encoder: SentenceEncoder,
    model_name: str,
    fingerprint: str,
    index: SearchIndex | None = None,
    settings: ServeSettings | None = None,
) -> FastAPI:
    """The ASGI app. `index`, if given, must have been checked against `fingerprint`.

    `settings.served.docs`: serve FastAPI's interactive `/docs` (Swagger UI, whose script and style come from a
    CDN, so it needs internet in the browser) under a Content-Security-Policy that allows that CDN
    only; off by default, so the server loads nothing from elsewhere. `/openapi.json` is always
    served.

    `settings.security` (see `dclr.serving.guard`): API key, Host allow-list, requests in flight;
    by default no key and any Host (`dclr serve` passes the loopback allow-list itself, see
    `dclr.serving.settings.for_bind`).
    """
    settings = settings or ServeSettings()
    limits, security = settings.limits, settings.security
    if index is not None:
        index.check_model(fingerprint, model_name)
        import faiss

        faiss.omp_set_num_threads(SEARCH_THREADS)
    workers = settings.batching.encode_workers or default_encode_workers(encoder)
    batching = replace(settings.batching, encode_workers=workers)
    batcher = EmbeddingBatcher(*encoder_functions(encoder, workers), batching)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await batcher.start(WARM_UP)
        try:
            yield
        finally:
            await batcher.close()

    app = FastAPI(
        title="dclr embeddings service",
        description=f"Sentence embeddings from {model_name}.",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.batcher = batcher
    if settings.served.docs:
        _add_docs(app)
    # Innermost first: a request takes an in-flight slot only after its whole body arrived.
    embed = _embedder(batcher)
    app.add_middleware(FastEmbeddings, handle=_fast_embeddings(limits, embed, model_name))
    app.add_middleware(InFlightMiddleware, max_in_flight=security.max_in_flight)
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)
    app.add_middleware(GuardMiddleware, security=security)  # outermost: runs first

    _add_error_handlers(app)
    _add_embedding_routes(app, encoder, model_name, limits, embed)
    _add_search_route(app, index, model_name, limits, embed, batcher)
    _add_health_route(app, encoder, model_name, fingerprint, index, limits, batcher)
    _add_page_routes(app)
    return app


Embed = Callable[[list[str], Request], Awaitable[tuple[np.ndarray, np.ndarray]]]


def embed_error_response(err: Exception) -> Response:
    """The answer when a request's texts could not be embedded: the queue is full (503 with
    Retry-After), the client went away (499, which nobody reads: it ends the cycle quietly) or
    the encoder failed on them (500). The route's handlers and the fast path both use it."""
    if isinstance(err, Overloaded):
        response = _error(503, str(err), "server_overloaded", None, "queue_full")
        response.headers["Retry-After"] = str(err.retry_after)
        return response
    if isinstance(err, ClientGone):
        return Response(status_code=CLIENT_CLOSED)
    return _error(500, str(err), "server_error", None, "encode_failed")


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as OpenAI-style JSON (never plain text), each with its status."""

    @app.exception_handler(LimitError)
    async def _limit(_: Request, err: LimitError) -> Response:
        return _error(err.status, err.message, "invalid_request_error", err.param, err.code)

    @app.exception_handler(Overloaded)
    @app.exception_handler(ClientGone)
    @app.exception_handler(EncodeFailed)
    async def _embedding_failed(_: Request, err: Exception) -> Response:
        return embed_error_response(err)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception) -> Response:  # JSON, never plain text
        message = f"internal error ({type(err).__name__}); the server log has the details"
        return _error(500, message, "server_error", None, "internal_error")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> Response:
        message, param, code = describe_validation(err.errors())
        return _error(422, message, "invalid_request_error", param, code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, err: StarletteHTTPException) -> Response:
        return _error(err.status_code, str(err.detail), "invalid_request_error", None, None)


def _embedder(batcher: EmbeddingBatcher) -> Embed:
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
        except Overloaded:
            raise
        except Exception as err:  # noqa: BLE001 - this request's texts broke the encoder
            raise EncodeFailed(
                f"the encoder failed on this request's texts ({type(err).__name__}: {err})"
            ) from err
        return vectors, tokens

    return embed


def _fast_embeddings(limits: Limits, embed: Embed, model_name: str) -> Handle:
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
        except (Overloaded, ClientGone, EncodeFailed) as err:
            response = embed_error_response(err)
        await response(scope, receive, send)
        return True

    return handle


def _add_embedding_routes(
    app: FastAPI, encoder: SentenceEncoder, model_name: str, limits: Limits, embed: Embed
) -> None:
    """POST /v1/embeddings (OpenAI-compatible) and POST /similarity."""

    @app.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERRORS)
    async def embeddings(request: EmbeddingsRequest, raw: Request) -> Response:
        """OpenAI-compatible embeddings (unit-length vectors)."""
        texts = [request.input] if isinstance(request.input, str) else request.input
        check_texts(limits, texts, "input")
        if request.dimensions is not None and request.dimensions != encoder.hidden_size:
            raise LimitError(
                400,
                f"dimensions: this model returns {encoder.hidden_size}-dimensional vectors "
                "and does not truncate them",
                "dimensions",
                "unsupported_dimensions",
            )
        vectors, tokens = await embed(texts, raw)
        body = embeddings_body(vectors, tokens, request.encoding_format, model_name)
        return json_response(body)

    @app.get("/v1/models")
    async def models() -> Response:
        """The served model, in OpenAI's list shape (clients probe this route)."""
        card = {"id": model_name, "object": "model", "created": STARTED, "owned_by": "dclr"}
        return json_response({"object": "list", "data": [card]})

    @app.post("/similarity", response_model=SimilarityResponse, responses=ERRORS)
    async def similarity(request: SimilarityRequest, raw: Request) -> Response:
        """Cosine similarity of each pair, or the cosine matrix of a list of sentences."""
        if request.pairs is not None:
            texts = [text for pair in request.pairs for text in pair]
            check_texts(limits, texts, "pairs", lambda i: f"pairs[{i // 2}][{i % 2}]")
            vectors, _ = await embed(texts, raw)
            scores = np.einsum("pd,pd->p", vectors[0::2], vectors[1::2])  # (pairs,)
            return json_response({"model": model_name, "scores": scores})
        assert request.sentences is not None
        check_texts(limits, request.sentences, "sentences")
        vectors, _ = await embed(request.sentences, raw)
        matrix = np.ascontiguousarray(vectors @ vectors.T)  # (n, n)
        return json_response({"model": model_name, "matrix": matrix})


def _add_search_route(
    app: FastAPI,
    index: SearchIndex | None,
    model_name: str,
    limits: Limits,
    embed: Embed,
    batcher: EmbeddingBatcher,
) -> None:
    """POST /search over the loaded index (404 without one)."""

    @app.post("/search", response_model=SearchResponse, responses={**ERRORS, 404: ERRORS[422]})
    async def search(request: SearchRequest, raw: Request) -> Response:
        """Top-k texts of the loaded index by cosine similarity to the query."""
        if index is None:
            return _error(
                404,
                "no index is loaded: start the server with --index DIR",
                "invalid_request_error",
                None,
                "no_index",
            )
        check_texts(limits, [request.query], "query")
        check_k(limits, request.k)
        vectors, _ = await embed([request.query], raw)
        loop = asyncio.get_running_loop()
        hits = (await loop.run_in_executor(batcher.executor, index.search, vectors, request.k))[0]
        results = [{"rank": r + 1, **asdict(hit)} for r, hit in enumerate(hits)]
        return json_response({"model": model_name, "query": request.query, "results": results})


def _add_health_route(
    app: FastAPI,
    encoder: SentenceEncoder,
    model_name: str,
    fingerprint: str,
    index: SearchIndex | None,
    limits: Limits,
    batcher: EmbeddingBatcher,
) -> None:
    """GET /health: liveness, what is served, the limits and the batcher's counters."""

    @app.get("/health", response_model=HealthResponse)
    async def health() -> HealthResponse:
        """Liveness, the model and index served, the limits, and batching counters."""
        index_info = None
        if index is not None:  # the build loaded at start, and whether the folder has moved on
            on_disk = index.folder_build()
            index_info = {"count": index.meta["count"], **index.meta["params"],
                          "build": index.build, "folder_build": on_disk,
                          "stale": on_disk != index.build}  # fmt: skip
        return HealthResponse(
            model=model_name,
            fingerprint=fingerprint[:SHORT],
            dim=encoder.hidden_size,
            index=index_info,
            limits=asdict(limits),
            batcher=asdict(batcher.stats),
        )


def _add_page_routes(app: FastAPI) -> None:
    """The search page, its static files and an empty favicon."""

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return Response(_static("index.html"), media_type="text/html", headers=PAGE_HEADERS)

    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon() -> Response:
        return Response(status_code=204)  # no icon, and no 404 in the browser console

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        if name not in STATIC_FILES:
            return _error(404, "not found", "invalid_request_error", None, None)
        return Response(_static(name), media_type=STATIC_FILES[name], headers=PAGE_HEADERS)


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


def _static(name: str) -> bytes:
    return (resources.files("dclr.serving") / "static" / name).read_bytes()
