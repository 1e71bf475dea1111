"""The HTTP face of a trained encoder: an embeddings / similarity / search service and a web page.

Modules, one job each:

- `limits`, `batcher`, `schemas`, `service`: the FastAPI embeddings service;
- `guard`, `middleware`: per-connection and per-request bounds;
- `server`, `launch`: the listening socket and the process that serves it;
- `static/`: the web page the service serves at `/`;
- `cli`: the `encode-bulk`, `index`, `search` and `serve` commands.

Bulk encoding and the index live below, in `dclr.indexing`. The service needs the `serve` extra:
`pip install 'dclr[serve]'`.
"""
