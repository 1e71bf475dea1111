"""Exact top-k inner-product search in bounded memory.

The corpus arrives chunk by chunk (encode a chunk, search it, drop it); for each batch of queries
the best k of the chunk are merged with the best k so far (`torch.topk` over the 2k candidates).
Peak memory is the queries (Q x d), the running top k (Q x k scores and ids), one corpus chunk
(C x d) and one score block (B x C): never the Q x N similarity matrix, so a 1M-passage corpus
needs what a 50k-passage one does.
"""

from __future__ import annotations

import numpy as np
import torch

# 512 queries x 50k passages = 25.6M float32 scores = 100 MB per block; sentence-transformers'
# InformationRetrievalEvaluator uses the same corpus chunk (corpus_chunk_size=50000).
QUERY_BATCH = 512
CORPUS_CHUNK = 50_000


class RunningTopK:
    """The k highest scores per query over every corpus chunk added so far.

    `queries` are (Q, d) float32 (unit vectors for cosine); `add(chunk)` takes the next (C, d)
    corpus rows; `result()` gives (Q, k') scores best first and their corpus row numbers, with
    k' = min(k, corpus rows seen). Ties at the cut keep what `torch.topk` keeps; the metrics order
    equal scores by id themselves (`dclr.evaluation.retrieval.trec_order`).
    """

    def __init__(self, queries: np.ndarray | torch.Tensor, k: int, query_batch: int = QUERY_BATCH):
        if k < 1 or query_batch < 1:
            raise ValueError("k and query_batch must be >= 1")
        self.queries = torch.as_tensor(np.asarray(queries, dtype=np.float32))  # (Q, d)
        self.k = k
        self.query_batch = query_batch
        n = len(self.queries)
        self.scores = torch.empty(n, 0)  # (Q, k' <= k)
        self.rows = torch.empty(n, 0, dtype=torch.long)  # (Q, k')
        self.seen = 0

    @torch.inference_mode()
    def add(self, chunk: np.ndarray | torch.Tensor) -> None:
        chunk = torch.as_tensor(np.asarray(chunk, dtype=np.float32))  # (C, d)
        if chunk.ndim != 2 or chunk.shape[1] != self.queries.shape[1]:
            raise ValueError(
                f"chunk must be (C, {self.queries.shape[1]}), got {tuple(chunk.shape)}"
            )
        keep = min(self.k, self.scores.shape[1] + len(chunk))
        scores = torch.empty(len(self.queries), keep)
        rows = torch.empty(len(self.queries), keep, dtype=torch.long)
        offset = torch.arange(self.seen, self.seen + len(chunk))  # (C,) global row numbers
        for start in range(0, len(self.queries), self.query_batch):
            batch = slice(start, start + self.query_batch)
            block = self.queries[batch] @ chunk.T  # (B, C)
            top = block.topk(min(self.k, len(chunk)), dim=1)  # (B, <=k) each
            both_scores = torch.cat([self.scores[batch], top.values], dim=1)  # (B, k' + <=k)
            both_rows = torch.cat([self.rows[batch], offset[top.indices]], dim=1)
            best = both_scores.topk(keep, dim=1)  # (B, keep), sorted best first
            scores[batch] = best.values
            rows[batch] = both_rows.gather(1, best.indices)
        self.scores, self.rows = scores, rows
        self.seen += len(chunk)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(Q, k') scores and corpus row numbers, best first."""
        return self.scores.numpy(), self.rows.numpy()
