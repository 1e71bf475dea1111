"""Use a trained encoder: bulk encoding, a FAISS search index, an HTTP service and a web page.

Modules, one job each:

- `readers`: stream the texts of a .txt / .csv / .tsv / .jsonl / .parquet file, row by row;
- `shards`: write and read float32/float16 vector shards (.npy or Parquet), atomically;
- `bulk`: resumable bulk encoding of a file into shards, in one or several processes;
- `fingerprint`: a hash of a model's weights, tokenizer and pooler;
- `index`: build, save, load and query a FAISS index tied to the model that built it;
- `limits`, `batcher`, `schemas`, `service`: the FastAPI embeddings service;
- `static/`: the web page the service serves at `/`;
- `cli`: the `encode-bulk`, `index`, `search` and `serve` commands.

The service, the index and Parquet need the `serve` extra: `pip install 'dclr[serve]'`.
"""
