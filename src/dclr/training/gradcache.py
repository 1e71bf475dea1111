"""Large batches on small memory: the GradCache idea (Gao et al., 2021) for any dclr loss.

A contrastive loss couples every sentence of the batch, so the batch cannot simply be split into
gradient-accumulation steps. GradCache splits only the *encoder* work:
  1. encode the 2n view rows in chunks without building graphs, keeping each chunk's RNG state;
  2. compute the loss on the detached embeddings and backpropagate it to them (cheap: (2n, d));
  3. re-encode each chunk with gradients, *replaying its RNG state* so dropout masks are identical
     to pass 1, and backpropagate the cached embedding gradients through it.
Peak activation memory is that of one chunk. The loss is exactly the uncached loss on the
pass-1 embeddings, and the parameter gradients equal the uncached ones whenever the encoder's
randomness is the same (dropout off, or the same chunking), which the tests check.
"""

from __future__ import annotations

import contextlib
from typing import cast

import torch
from torch import nn

from dclr.contract import Batch, SupportsGradCache
from dclr.errors import ConfigError


def _rng_state(device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, torch.Tensor | None], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


class GradCache(nn.Module):
    """Wrap a loss module that has `.model` and `.objective(z1, z2, batch)`.

    `forward(batch)` runs the three passes above, calls backward itself (scaled by
    `backward_scale`, e.g. the DDP world size) and returns the loss parts, detached.
    """

    def __init__(
        self, loss: nn.Module, chunk_size: int, backward_scale: float | torch.Tensor = 1.0
    ) -> None:
        super().__init__()
        if chunk_size < 1:
            raise ConfigError(f"grad cache chunk size must be >= 1, got {chunk_size}")
        self.loss = cast(SupportsGradCache, loss)  # nn.Module typing hides .model, .objective
        self.chunk_size = chunk_size
        self.backward_scale = backward_scale

    def forward(self, batch: Batch) -> dict[str, torch.Tensor]:
        model, features = self.loss.model, batch.features
        n = features["input_ids"].shape[0]
        doubled = {k: torch.cat([v, v], dim=0) for k, v in features.items()}  # (2n, L)
        starts = range(0, 2 * n, self.chunk_size)
        chunks = [{k: v[s : s + self.chunk_size] for k, v in doubled.items()} for s in starts]
        device = features["input_ids"].device
        states, cached = [], []
        with torch.no_grad():  # pass 1: embeddings only
            for chunk in chunks:
                states.append(_rng_state(device))
                cached.append(model(**chunk))
        after_pass1 = _rng_state(device)
        z = torch.cat(cached).detach().requires_grad_(True)  # (2n, d)
        parts = self.loss.objective(z[:n], z[n:], batch)
        (parts["loss"] * self.backward_scale).backward()  # pass 2: d loss / d z
        grad = z.grad
        assert grad is not None
        sync = getattr(model, "no_sync", None)  # DDP: all-reduce on the last chunk only
        for i, (chunk, state) in enumerate(zip(chunks, states, strict=True)):
            _set_rng_state(state, device)  # same dropout masks as pass 1
            last = i == len(chunks) - 1
            context_manager = contextlib.nullcontext() if last or sync is None else sync()
            with context_manager:
                rows = model(**chunk)
                rows.backward(grad[i * self.chunk_size : i * self.chunk_size + rows.shape[0]])
        _set_rng_state(after_pass1, device)
        return {k: v.detach() for k, v in parts.items()}
