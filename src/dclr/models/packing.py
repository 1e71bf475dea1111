"""Padding-free forward passes by sequence packing, through the model's public inputs only.

Several sentences share one row of `input_ids`; `position_ids` restart at each sentence and a 4-D
additive attention mask is block-diagonal, so no token attends across sentences. The dense layers
(most of the cost) then run on real tokens only; the only waste is the tail of each row and the
attention over whole rows (rows are short, so that is small). No model class is modified: this uses
`position_ids` and a prepared 4-D `attention_mask`, which Hugging Face encoders accept.

`packing_supported(backbone)` checks numerically, on a probe, that a backbone gives the same
vectors packed and padded; models that ignore either input fall back to padded batches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Tokens per packed row; None = as long as the batch's longest sentence. Attention (its matmuls,
# softmax and, in training, the dropout that draws one random number per (row, head, i, j) entry,
# masked or not) grows with the row length, the dense layers only with the real tokens, so the
# shortest rows that still hold every sentence are fastest. Measured on MiniLM, 2 CPU threads
# (`python benchmarks/row_length.py`, docs/performance.md): a SimCSE step of batch 64 / length 32
# takes 1.03 s with rows as long as the longest sentence, 1.11 s at 64, 1.25 s at 128, 1.60 s at
# 256 (padded: 2.32 s); encoding runs 432 sentences/s against 359 at 256.
ROW_TOKENS: int | None = None


@dataclass
class PackedBatch:
    """Sentences packed into rows. segment (R, L): index of the sentence in the batch, -1 = pad."""

    input_ids: torch.Tensor  # (R, L)
    position_ids: torch.Tensor  # (R, L)
    attention_mask: torch.Tensor  # (R, 1, L, L) additive float mask
    segment: torch.Tensor  # (R, L)
    n: int  # sentences in the batch

    def to(self, device: torch.device) -> PackedBatch:
        return PackedBatch(
            self.input_ids.to(device),
            self.position_ids.to(device),
            self.attention_mask.to(device),
            self.segment.to(device),
            self.n,
        )


def pack(
    ids: list[list[int]],
    pad_id: int,
    position_offset: int = 0,
    row_tokens: int | None = ROW_TOKENS,
    dtype: torch.dtype = torch.float32,
) -> PackedBatch:
    """First-fit-decreasing packing of token-id lists into rows of at most `row_tokens`
    (None: as long as the longest sentence, so several short ones share a row)."""
    if row_tokens is None:
        row_tokens = max((len(i) for i in ids), default=1)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    rows: list[list[int]] = []  # sentence indices per row
    room: list[int] = []
    for i in order:
        size = len(ids[i])
        for r, free in enumerate(room):
            if size <= free:
                rows[r].append(i)
                room[r] -= size
                break
        else:
            rows.append([i])
            room.append(max(row_tokens, size) - size)
    width = max(sum(len(ids[i]) for i in row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(rows), width), dtype=torch.long)
    segment = torch.full((len(rows), width), -1, dtype=torch.long)
    for r, row in enumerate(rows):
        start = 0
        for i in row:
            size = len(ids[i])
            input_ids[r, start : start + size] = torch.tensor(ids[i])
            position_ids[r, start : start + size] = torch.arange(size) + position_offset
            segment[r, start : start + size] = i
            start += size
    same = segment[:, :, None] == segment[:, None, :]  # (R, L, L)
    real = (segment >= 0)[:, :, None] & (segment >= 0)[:, None, :]
    allowed = same & real
    allowed |= torch.eye(width, dtype=torch.bool)[None]  # pad rows attend to themselves: no NaN
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    return PackedBatch(input_ids, position_ids, mask[:, None], segment, len(ids))


def segment_mean(hidden: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
    """hidden (R, L, d), segment (R, L) -> (n, d) mean over each sentence's tokens."""
    flat = hidden.reshape(-1, hidden.shape[-1])  # (R*L, d)
    seg = segment.reshape(-1)
    keep = seg >= 0
    sums = torch.zeros(n, hidden.shape[-1], dtype=hidden.dtype, device=hidden.device)
    sums = sums.index_add(0, seg[keep], flat[keep])
    counts = torch.bincount(seg[keep], minlength=n).to(hidden.dtype).unsqueeze(1)
    return sums / counts


def segment_first(hidden: torch.Tensor, segment: torch.Tensor, n: int) -> torch.Tensor:
    """(n, d): each sentence's first token ([CLS] / <s>)."""
    seg = segment.reshape(-1)  # (R*L,)
    flat = hidden.reshape(-1, hidden.shape[-1])
    previous = torch.full_like(seg, -2)
    previous[1:] = seg[:-1]
    starts = torch.nonzero((seg >= 0) & (seg != previous)).squeeze(1)  # one per sentence
    return flat[starts[torch.argsort(seg[starts])]]


def unpad(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """(b, L) padded ids + mask -> b lists of real token ids."""
    return [
        row[mask.bool()].tolist()
        for row, mask in zip(input_ids.cpu(), attention_mask.cpu(), strict=True)
    ]


def position_offset(backbone: torch.nn.Module) -> int:
    """Where position ids start: RoBERTa-style embeddings count from padding_idx + 1, BERT from 0."""
    padding_idx = getattr(getattr(backbone, "embeddings", None), "padding_idx", None)
    return 0 if padding_idx is None else int(padding_idx) + 1
