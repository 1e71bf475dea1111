"""torch.distributed helpers: world info, a gather that keeps gradients for local rows, rank 0's
decisions given to every rank (`rank0_value`) and rows computed apart gathered (`assemble_rows`).

Under `torchrun` every rank encodes its slice of the global batch; `gather_with_grad` concatenates
all slices (rank order) so each rank sees the global batch as negatives. Only the local slice carries
gradients; each rank computes the same global loss, and the trainer scales it by the world size so
that DDP's gradient averaging yields exactly the single-process gradient of the global batch.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TypeVar

import numpy as np
import torch
import torch.distributed as dist

from dclr.errors import ConfigError

# False inside `gathering(False)`: a loss that asks for per-rank negatives (sentence-transformers'
# gather_across_devices=False) sees only its own rows, whatever the world size.
_GATHER: ContextVar[bool] = ContextVar("dclr_gather", default=True)

T = TypeVar("T")


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


# How long a rank waits in a collective for the others: rank 0 alone scores the starting model
# (and, when that pass builds it, the complementary cache: `dclr.methods.dclr_start`) and runs the
# dev evaluations while the other ranks wait at a barrier; torch's defaults (NCCL 10 min, gloo
# 30 min) can end a paper-scale run there. DCLR_DIST_TIMEOUT_MIN sets it.
TIMEOUT_ENV = "DCLR_DIST_TIMEOUT_MIN"
DEFAULT_TIMEOUT_MIN = 120.0
MAX_TIMEOUT_MIN = 7 * 24 * 60.0  # a week


def timeout_minutes() -> float:
    """The collectives' timeout in minutes: $DCLR_DIST_TIMEOUT_MIN, else DEFAULT_TIMEOUT_MIN."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_MIN
    try:
        minutes = float(raw)
    except ValueError:
        minutes = -1.0
    if not 0 < minutes <= MAX_TIMEOUT_MIN:  # inf or 1e30 would overflow a timedelta
        raise ConfigError(
            f"{TIMEOUT_ENV}={raw!r} is not a number of minutes above 0 and at most "
            f"{MAX_TIMEOUT_MIN:g}: set it to e.g. 180 (or unset it: {DEFAULT_TIMEOUT_MIN:g})"
        )
    return minutes


def init_from_env() -> bool:
    """Join the process group that `torchrun` describes in the environment, its collectives
    waiting `timeout_minutes()`; False when alone."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or is_distributed():
        return is_distributed()
    import datetime

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    timeout = datetime.timedelta(minutes=timeout_minutes())
    dist.init_process_group(backend=backend, timeout=timeout)
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return True


def barrier() -> None:
    """Wait for every rank (a no-op when alone)."""
    if is_distributed():
        dist.barrier()


@contextlib.contextmanager
def gathering(enabled: bool) -> Iterator[None]:
    """Inside the block `gather_with_grad` gathers across ranks only when `enabled`."""
    token = _GATHER.set(enabled)
    try:
        yield
    finally:
        _GATHER.reset(token)


def gathers() -> bool:
    """Whether `gather_with_grad` concatenates the ranks' rows here (distributed, not local)."""
    return is_distributed() and _GATHER.get()


def gather_with_grad(x: torch.Tensor) -> torch.Tensor:
    """(n_local, ...) on every rank -> (n_global, ...); gradients flow into the local slice only.
    Inside `gathering(False)` (or alone) the rows come back as they are."""
    if not gathers():
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.detach().contiguous())
    parts[rank()] = x
    return torch.cat(parts, dim=0)


def mean_over_ranks(x: torch.Tensor) -> torch.Tensor:
    """A per-rank mean loss as the global batch's: its value is the ranks' mean (the same on every
    rank, what one process computes on the global batch when the ranks' slices are equal), its
    gradient 1/W of the local one, so that the trainer's W scale and DDP's averaging give the
    global mean's gradient, as for the gathered losses. Alone (or in `gathering(False)`) x itself."""
    if not gathers():
        return x
    world = world_size()
    total = x.detach().clone()
    dist.all_reduce(total)
    return total / world + (x - x.detach()) / world  # the value bit for bit the same everywhere


def average_gradients(modules: list[torch.nn.Module]) -> None:
    """Average the gradients of modules that DDP does not wrap (an objective's own trained
    modules, e.g. the NLI head) across ranks, as DDP averages the model's: one all-reduce of their
    flattened gradients. A parameter without a gradient counts as zeros. A no-op when alone."""
    if not is_distributed():
        return
    params = [p for module in modules for p in module.parameters() if p.requires_grad]
    if not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size()
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p)  # views of one buffer, no copy
        offset += n


def rank0_value(compute: Callable[[], T]) -> T:
    """`compute()` on rank 0, its value given to every rank (one decision for the whole run,
    whatever each rank's files would say, e.g. whether a cache exists yet; the other ranks wait
    for it). Alone, `compute()`."""
    if not is_distributed():
        return compute()
    sent: list[object] = [compute() if rank() == 0 else None]
    dist.broadcast_object_list(sent, src=0)
    return sent[0]  # type: ignore[return-value]


def collective_device() -> torch.device:
    """Where the process group's tensors live: this rank's GPU under NCCL, else the CPU."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def assemble_rows(rows: np.ndarray, values: np.ndarray, total: int) -> np.ndarray:
    """Every rank's (rows, values) pairs, gathered into one (total, ...) array on every rank:
    row `rows[i]` of the result is `values[i]` of the rank that holds it (the ranks may hold
    different counts; every row is held by some rank). Alone, `values` placed at `rows`."""
    out = np.empty((total, *values.shape[1:]), dtype=values.dtype)
    if not is_distributed():
        out[rows] = values
        return out
    world, device = world_size(), collective_device()
    count = torch.tensor([len(rows)], dtype=torch.int64, device=device)
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count)
    most = max(int(c.item()) for c in counts)
    padded_rows = torch.full((most,), -1, dtype=torch.int64, device=device)
    padded_rows[: len(rows)] = torch.from_numpy(np.asarray(rows, dtype=np.int64))
    local = torch.from_numpy(np.ascontiguousarray(values))
    padded = torch.zeros((most, *values.shape[1:]), dtype=local.dtype, device=device)
    padded[: len(values)] = local
    all_rows = [torch.empty_like(padded_rows) for _ in range(world)]
    all_values = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(all_rows, padded_rows)
    dist.all_gather(all_values, padded)
    for n, got_rows, got in zip(counts, all_rows, all_values, strict=True):
        k = int(n.item())
        out[got_rows[:k].cpu().numpy()] = got[:k].cpu().numpy()
    return out
