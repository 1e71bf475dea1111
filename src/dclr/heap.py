"""Give memory that Python and torch have freed back to the operating system (glibc's
`malloc_trim`; elsewhere, musl, macOS or Windows, only garbage collection).

glibc's malloc keeps freed blocks for reuse, so a process's resident memory stays at its high
mark long after the work that needed it:
- Between phases of a run (`release_freed_memory`): after it has served a large block from
  `mmap` and freed it, glibc's dynamic threshold rises (up to 32 MB) and later blocks come from
  the heap, whose freed pages it keeps. A phase that allocates much and frees it (φ calibration,
  encoding the complementary cache) thus leaves hundreds of MB counted against the process while
  the next phase (training steps) allocates afresh. Lowering the threshold instead
  (`MALLOC_MMAP_THRESHOLD_`) saves as much but makes every training step fault its activations in
  anew: slower steps on MiniLM (2 CPU threads): 3x in the first measurement, 1.4x on the
  quickstart recipe's 15 steps (docs/performance.md, "Large batches on small memory").
- After batches of varied shapes (`trim_heap`): dynamic batching sends the model a new tensor
  shape almost every call; glibc keeps the freed blocks of each shape, fragmented, so a
  long-running server's resident memory creeps up with the variety of shapes it has seen (MiniLM
  on 2 cores: 405 MiB -> 995 MiB after 240 random batches of 1-64 STS sentences; flat at ~505 MiB
  with a trim after each batch). Trimming after every batch cost ~9% of the wall time (the
  returned pages fault back in); at most once a second it costs little and still bounds the creep.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys
import time
from collections.abc import Callable

# Seconds between `trim_heap` calls that trim: several batches apart under load, so the pages
# handed back and faulted in again stay a small share of the work; idle servers trim on their next
# batch.
TRIM_INTERVAL_S = 1.0
_last_trim = float("-inf")


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None (not Linux, or not glibc: nothing to call)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None)
    except OSError:
        return None


def trim_heap(min_interval_s: float = TRIM_INTERVAL_S) -> bool:
    """Release free heap pages to the OS, at most once per `min_interval_s` seconds; whether it
    trimmed (False too where the C library cannot)."""
    global _last_trim
    trim = _malloc_trim()
    now = time.monotonic()
    if trim is None or now - _last_trim < min_interval_s:
        return False
    trim(0)
    _last_trim = now
    return True


def release_freed_memory() -> bool:
    """Collect garbage, then return the allocator's free pages to the system; whether it could."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
