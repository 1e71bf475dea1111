"""The HTTP face of a trained encoder: an embeddings / similarity / search service and a web page.

Modules, one job each (bottom to top):

- `settings`: every setting of `dclr serve`, declared once (`ServeSettings`, in sections);
- `errors`: every error the server answers, and the one place its JSON is built;
- `limits`: the checks of the per-request limits (`LimitError`);
- `batcher`: dynamic batching by tokens, the queue and its admission;
- `encoding`: the encoder adapter (the batcher's tokenize / encode) and the thread policy;
- `headers`: the client-timeout headers and the page's and `/docs`' security headers;
- `validation`: FastAPI's validation errors in words (the 422 message);
- `schemas`: the request and response models (pydantic, OpenAPI);
- `fastpath`: POST /v1/embeddings for well-formed bodies, without FastAPI's routing;
- `embed`: a request's texts through the batcher to its answer (routes and fast path);
- `guard`, `middleware`, `mediatype`: who may ask and how much at once; request-body bounds;
  JSON only (415 for any other body type);
- `service`: the routes, and `create_app`, which puts the app together;
- `protocols`: uvicorn's HTTP protocols with the connection guard (uvicorn pinned in
  pyproject.toml; tests/serving/test_uvicorn_fence.py guards the internals they rely on);
- `server`, `startup`, `launch`: the listening socket; loading the model and building the app;
  `dclr serve` as a child process (tests, benchmarks);
- `static/`: the web page the service serves at `/`.

The commands (`encode-bulk`, `index`, `search`, `serve`) are in `dclr.cli.serving`. Bulk encoding
and the index live below, in `dclr.indexing`. The service needs the `serve` extra:
`pip install 'dclr[serve]'`.
"""
