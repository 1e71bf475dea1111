"""The encoder adapter: the batcher's two halves (texts -> token ids, ids -> unit vectors) for
a `SentenceEncoder`, and the thread policy (how many passes at once, how many intra-op threads
each pass takes)."""

from __future__ import annotations

import numpy as np
import torch

from dclr.heap import trim_heap
from dclr.models.cpu_kind import cpu_policy
from dclr.models.encoder import SentenceEncoder
from dclr.serving.batcher import EncodeIds, Tokenize

# Encoded (twice, unmeasured) before the first request: a short and a longer text.
WARM_UP = ["warm up", "a longer sentence to warm up the model before the first request " * 4]


def default_encode_workers(encoder: SentenceEncoder) -> int:
    """Passes to encode at once: two on a CPU with two or more intra-op threads (each pass on
    half of them), one on a GPU.

    Two one-thread passes on two cores beat one two-thread pass when requests keep arriving:
    the event loop that parses them takes a core now and then, and a two-thread pass then
    waits at every parallel region for the thread it displaced, while an independent pass
    only loses the time taken (docs/performance.md, "Serving against infinity-emb")."""
    on_cpu = next(encoder.parameters()).device.type == "cpu"
    return 2 if on_cpu and torch.get_num_threads() >= 2 else 1


def one_thread_below_tokens() -> int:
    """Passes under this many tokens (a query of a few texts) run on one intra-op thread: the
    figure measured for this CPU kind (`dclr.models.cpu_kind.cpu_policy`; 128 where none is)."""
    return cpu_policy().one_thread_below_tokens


def pass_threads(tokens: int, threads: int) -> int:
    """Intra-op threads for a pass of `tokens` tokens: one below `one_thread_below_tokens()`.

    A pass that small gains too little from a second thread (its matrices are too small to split
    well), and the threads it would wake compete with the event loop, which parses, validates and
    answers requests on the same cores. Where serving measured it (the first AVX512 machine,
    sequential one-text requests): p50 20.2 ms and 26.6 CPU s / 1,000 texts on 2 threads, 16.1 ms
    and 17.0 s on 1; larger passes keep every thread (with one, 32 clients x 1 text fell from 194
    to 137 texts/s)."""
    return 1 if tokens < one_thread_below_tokens() else threads


def encoder_functions(encoder: SentenceEncoder, workers: int = 1) -> tuple[Tokenize, EncodeIds]:
    """The batcher's two halves: texts -> token ids (truncated where the model truncates, as
    bulk encoding does), and token ids -> (unit vectors (n, d) float32,).

    A pass is encoded as `SentenceEncoder.encode` encodes a corpus: longest first and packed
    (padding-free) when the encoder packs, so a served vector is the bulk-encoded vector of the
    same text, whatever its batch-mates. With `workers` passes at once, each runs on its share
    of the process's intra-op threads."""
    pooler = encoder.eval_pooler or encoder.pooler

    def tokenize(texts: list[str]) -> list[list[int]]:
        # cut by characters first (dclr.data.text.clip_for_tokens): bounded tokenizer work and
        # memory per text whatever --max-chars allows, the same ids as bulk encoding
        return encoder.token_ids(texts)

    threads = max(1, torch.get_num_threads() // workers)  # the process's setting, shared

    def encode(ids: list[list[int]]) -> tuple[np.ndarray]:
        want = pass_threads(sum(len(x) for x in ids), threads)
        if torch.get_num_threads() != want:  # ~1.5 us; only when a pass crosses the line
            torch.set_num_threads(want)
        vectors = encoder.encode_ids_poolers(ids, (pooler,), batch_size=len(ids), normalize=True)
        trim_heap()  # see dclr.heap: keeps resident memory flat across shapes
        return (vectors[pooler],)

    return tokenize, encode
