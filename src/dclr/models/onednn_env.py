"""Bounds on PyTorch's oneDNN caches, set in the environment before torch loads.

oneDNN keeps a primitive per input shape (ONEDNN_PRIMITIVE_CACHE_CAPACITY, default 1,024) and
PyTorch's ideep layer a cache of its own (LRU_CACHE_CAPACITY, default 1,024). A served or bulk
pass through `dclr.models.onednn` has a new row count almost every time, so both fill with the
primitives of past shapes: on MiniLM, 300 passes of 1-64 texts peak at 975 MiB resident against
743 on PyTorch's BLAS kernel. 16 entries hold the 4 layer shapes of the last few passes (a pass
reuses its primitives once per layer); with both at 16 the same passes peak at 611 MiB.

Both are read when libtorch loads, so `import dclr` sets them (unless they are set already)
before anything imports torch; a program that imports torch before dclr keeps the defaults (more
memory, the same speed) unless it sets them itself.
"""

from __future__ import annotations

import os

CACHE_CAPACITY = {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "16", "LRU_CACHE_CAPACITY": "16"}


def bound_onednn_caches() -> None:
    """Set each cache's capacity unless the environment already does."""
    for name, value in CACHE_CAPACITY.items():
        os.environ.setdefault(name, value)
