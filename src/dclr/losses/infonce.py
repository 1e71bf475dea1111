"""InfoNCE, written once: every contrastive loss of dclr is this function with its own blocks.

For anchors a (n, d), candidate blocks B_1..B_m (each (k_b, d)) and temperature tau, the logits are
s = [cos(a, B_1) | ... | cos(a, B_m)] / tau, shape (n, sum k_b), and
    loss = mean_i -log( e^{s_i,y_i} / sum_{j not masked} e^{s_ij} )
with y_i = i (row i of block 0 is anchor i's positive) unless `labels` are given. `masked`
(n, sum k_b) removes entries from the denominator (they become -inf): DCLR's dropped false
negatives, NT-Xent's self-similarities. The positive stays in the denominator, as in SimCSE.
Under autocast the softmax runs in float32.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a: (n, d), b: (m, d) -> (n, m) cosine similarities."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def info_nce(
    anchors: torch.Tensor,
    candidate_blocks: Sequence[torch.Tensor],
    temperature: float,
    masked: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Mean InfoNCE; anchors (n, d), blocks each (k, d) -> scalar (see the module docstring)."""
    logits = torch.cat([cosine_matrix(anchors, block) for block in candidate_blocks], dim=1)
    logits = logits / temperature  # (n, sum k)
    if masked is not None:
        logits = logits.masked_fill(masked, float("-inf"))
    if logits.dtype in (torch.float16, torch.bfloat16):  # softmax in fp32 under autocast
        logits = logits.float()
    if labels is None:
        labels = torch.arange(anchors.shape[0], device=anchors.device)
    return F.cross_entropy(logits, labels)
