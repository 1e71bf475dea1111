"""The embeddings HTTP service: a FastAPI app around one encoder (and optionally one index).

Routes: `POST /v1/embeddings` (OpenAI-compatible), `POST /similarity` (pairs -> cosines, or
sentences -> cosine matrix), `POST /search` (when an index is loaded), `GET /health`, the web page
at `/` (with `/static/app.js`, `/static/app.css`), FastAPI's `/openapi.json`, and `/docs` only
with `--docs`.
Vectors are L2-normalised, so a dot product is a cosine. Every error is JSON in OpenAI's shape,
built and listed in `dclr.serving.errors`: 400 for a broken limit or invalid text (the message
names the field), 401 without the API key (when one is set), 408 for a body that does not arrive
in time, 413 for an oversized body, 421 for a Host not on the allow-list, 422 for a malformed
request, 404 when no index is loaded, 500 when the encoder fails on this request's own texts
(requests batched with it are not affected), 503 when the queue is full (with Retry-After). A
request whose client disconnects while queued is dropped without being encoded.

This module holds the routes and puts the app together; the rest is in modules of their own
(the package map in `dclr.serving`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, replace
from importlib import resources
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from dclr.indexing.fingerprint import SHORT
from dclr.indexing.index import SearchIndex
from dclr.models.encoder import SentenceEncoder
from dclr.serving.batcher import CannotFinishInTime, EmbeddingBatcher, Overloaded
from dclr.serving.embed import (
    ClientGone,
    Embed,
    EncodeFailed,
    embed_error_response,
    embedder,
    embeddings_body,
    fast_embeddings,
    json_response,
    shorten,
)
from dclr.serving.encoding import WARM_UP, default_encode_workers, encoder_functions
from dclr.serving.errors import (
    error_response,
    http_error_response,
    validation_response,
)
from dclr.serving.fastpath import FastEmbeddings
from dclr.serving.guard import GuardMiddleware, InFlightMiddleware
from dclr.serving.headers import DOCS_HEADERS, PAGE_HEADERS
from dclr.serving.limits import LimitError, check_k, check_texts
from dclr.serving.mediatype import JsonOnlyMiddleware
from dclr.serving.middleware import BodyLimitMiddleware
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
from dclr.serving.validation import describe_validation

# When this process started serving: /v1/models's `created` (seconds since the epoch).
STARTED = int(time.time())
# The page's files, served from the package; nothing else under /static is reachable.
STATIC_FILES = {"app.js": "text/javascript", "app.css": "text/css"}
# FAISS threads: a request searches one query, which one thread does fastest; more OpenMP
# threads would only spin against the encoder's own threads in this process.
SEARCH_THREADS = 1
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {  # FastAPI's `responses` type, in /openapi.json
    400: {"model": ErrorResponse, "description": "A limit was broken (the message names it)."},
    401: {"model": ErrorResponse, "description": "Missing or wrong API key (when one is set)."},
    413: {"model": ErrorResponse, "description": "Request body over max_body_bytes."},
    422: {"model": ErrorResponse, "description": "Malformed request."},
    500: {"model": ErrorResponse, "description": "The encoder failed on this request's texts."},
    503: {"model": ErrorResponse, "description": "Queue full; retry after Retry-After seconds."},
}


def _add_docs(app: FastAPI) -> None:
    from fastapi.openapi.docs import get_swagger_ui_html

    @app.get("/docs", include_in_schema=False)
    async def _docs() -> Response:
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")
        page.headers.update(DOCS_HEADERS)
        return page


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
    embed = embedder(batcher)
    app.add_middleware(FastEmbeddings, handle=fast_embeddings(limits, embed, model_name))
    app.add_middleware(InFlightMiddleware, max_in_flight=security.max_in_flight)
    app.add_middleware(BodyLimitMiddleware, max_bytes=limits.max_body_bytes)
    app.add_middleware(JsonOnlyMiddleware)  # before any byte of a body is read
    app.add_middleware(GuardMiddleware, security=security)  # outermost: runs first

    _add_error_handlers(app)
    _add_embedding_routes(app, encoder, model_name, limits, embed)
    _add_search_route(app, index, model_name, limits, embed, batcher)
    _add_health_route(app, encoder, model_name, fingerprint, index, limits, batcher)
    _add_page_routes(app)
    return app


BODY_PARSE_FAILED = "There was an error parsing the body"  # fastapi.routing's 400 detail


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as OpenAI-style JSON (never plain text), each with its status."""

    @app.exception_handler(LimitError)
    async def _limit(_: Request, err: LimitError) -> Response:
        return error_response(err.code, err.message, err.param)

    @app.exception_handler(Overloaded)
    @app.exception_handler(CannotFinishInTime)
    @app.exception_handler(ClientGone)
    @app.exception_handler(EncodeFailed)
    async def _embedding_failed(_: Request, err: Exception) -> Response:
        return embed_error_response(err)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, err: Exception) -> Response:  # JSON, never plain text
        message = f"internal error ({type(err).__name__}); the server log has the details"
        return error_response("internal_error", message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, err: RequestValidationError) -> Response:
        message, param, code = describe_validation(err.errors())
        return validation_response(message, param, code)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, err: StarletteHTTPException) -> Response:
        if err.status_code == 400 and err.detail == BODY_PARSE_FAILED:  # FastAPI's own words
            # bytes that are not UTF-8, or JSON nested too deep to parse: malformed JSON, 422
            # as the docs promise (not a bare 400 without a code)
            message = "the body is not valid JSON (UTF-8 text, one JSON object)"
            return validation_response(message, None, "json_invalid")
        return http_error_response(err.status_code, str(err.detail))


def _add_embedding_routes(
    app: FastAPI, encoder: SentenceEncoder, model_name: str, limits: Limits, embed: Embed
) -> None:
    """POST /v1/embeddings (OpenAI-compatible) and POST /similarity."""

    @app.post("/v1/embeddings", response_model=EmbeddingsResponse, responses=ERROR_RESPONSES)
    async def embeddings(request: EmbeddingsRequest, raw: Request) -> Response:
        """OpenAI-compatible embeddings (unit-length vectors)."""
        texts = [request.input] if isinstance(request.input, str) else request.input
        check_texts(limits, texts, "input")
        dims = request.dimensions
        if dims is not None and not 1 <= dims <= encoder.hidden_size:
            raise LimitError(
                f"dimensions must be between 1 and {encoder.hidden_size} (this model's "
                f"vectors are {encoder.hidden_size}-dimensional), got {dims}",
                "dimensions",
                "unsupported_dimensions",
            )
        vectors, tokens = await embed(texts, raw)
        if dims is not None and dims < encoder.hidden_size:
            vectors = shorten(vectors, dims)
        body = embeddings_body(vectors, tokens, request.encoding_format, model_name)
        return json_response(body)

    @app.get("/v1/models")
    async def models() -> Response:
        """The served model, in OpenAI's list shape (clients probe this route)."""
        card = {"id": model_name, "object": "model", "created": STARTED, "owned_by": "dclr"}
        return json_response({"object": "list", "data": [card]})

    @app.post("/similarity", response_model=SimilarityResponse, responses=ERROR_RESPONSES)
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

    @app.post(
        "/search",
        response_model=SearchResponse,
        responses={**ERROR_RESPONSES, 404: ERROR_RESPONSES[422]},
    )
    async def search(request: SearchRequest, raw: Request) -> Response:
        """Top-k texts of the loaded index by cosine similarity to the query."""
        if index is None:
            message = "no index is loaded: start the server with --index DIR"
            return error_response("no_index", message)
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
            return http_error_response(404, "not found")
        return Response(_static(name), media_type=STATIC_FILES[name], headers=PAGE_HEADERS)


def _static(name: str) -> bytes:
    return (resources.files("dclr.serving") / "static" / name).read_bytes()
