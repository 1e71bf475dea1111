"""Training in less memory (`optimisation.low_memory`): the same update, a lower peak.

Where a MiniLM step's memory goes on a CPU (quickstart recipe, batch 64, `grad_cache_chunk=16`,
docs/performance.md "Training in less memory"): the word-embedding table is half the model (30,522
x 384 of 22.7 M parameters), and its gradient is dense: every backward pass writes a 47 MB tensor
that is nearly all zeros (a batch uses a few hundred of its rows), and with GradCache each chunk's
pass writes another before adding it in. What `low_memory` changes:
- the input embeddings' gradients are sparse while backward runs (the rows the batch used), and
  made dense once, after it, for clipping and AdamW (`densify_grads`): the same sum, one dense
  tensor a step instead of one per chunk;
- the heap is trimmed after backward (`dclr.heap.trim_heap`), before AdamW's step: the freed
  activations of the passes go back to the system instead of being counted with the optimizer's;
- AdamW runs fused (torch's one kernel over every tensor; `optimisation.fused_optimizer: off`
  keeps the per-tensor loop), which makes no temporaries of a parameter's size.

The update is AdamW's on the same gradients: only the order of float additions differs (the
recorded trajectories use the default path, and a test holds the two to float rounding).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


def sparse_embedding_grads(backbone: Any) -> torch.nn.Embedding | None:
    """Make a Hugging Face backbone's input-embedding table produce sparse gradients; the table
    (None when the backbone has no `nn.Embedding` input table)."""
    getter = getattr(backbone, "get_input_embeddings", None)
    table = getter() if callable(getter) else None
    if not isinstance(table, torch.nn.Embedding):
        return None
    table.sparse = True
    return table


def densify_grads(parameters: Iterable[torch.nn.Parameter]) -> int:
    """Replace each sparse gradient by its dense equal (duplicate rows summed); how many were."""
    count = 0
    for param in parameters:
        if param.grad is not None and param.grad.is_sparse:
            param.grad = param.grad.coalesce().to_dense()
            count += 1
    return count
