"""Vectors at scale, below the HTTP service: bulk encoding and a search index.

Modules, one job each:

- `shards`: write and read float32/float16 vector shards (.npy or Parquet), atomically;
- `bulk`: resumable bulk encoding of a file into shards, in one or several processes;
- `fingerprint`: a hash of a model's weights, tokenizer and pooler;
- `index`: build, save, load and query a FAISS index tied to the model that built it;
- `memory`: hand freed heap back to the system after a large job.

Texts are read by `dclr.data.readers`. The index and Parquet need the `serve` extra:
`pip install 'dclr[serve]'`.
"""
