"""Give memory that Python and torch have freed back to the operating system.

glibc's malloc keeps freed blocks for reuse: after it has served a large block from `mmap` and
freed it, its dynamic threshold rises (up to 32 MB) and later blocks come from the heap, whose
freed pages it keeps. A phase that allocates much and frees it (φ calibration, encoding the
complementary cache) thus leaves hundreds of MB counted against the process while the next phase
(training steps) allocates afresh. `malloc_trim(0)` between phases returns those pages. Lowering
the threshold instead (`MALLOC_MMAP_THRESHOLD_`) saves as much but makes every training step
fault its activations in anew: 3x slower steps measured on MiniLM (2 CPU threads).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys
from functools import cache


@cache
def _malloc_trim() -> object | None:
    """glibc's `malloc_trim`, or None (macOS, Windows, musl: nothing to call)."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def release_freed_memory() -> bool:
    """Collect garbage, then return the allocator's free pages to the system; whether it could."""
    gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)  # type: ignore[operator]
    return True
