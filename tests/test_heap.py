"""`release_freed_memory` returns freed heap pages to the system where glibc can (issue 47)."""

from __future__ import annotations

import sys

import pytest

from dclr.heap import release_freed_memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_small_blocks_go_back_to_the_system():
    # 200 MB in 4 kB blocks: below the mmap threshold, so from the heap, kept there once freed
    blocks = [bytearray(4000) for _ in range(50_000)]
    held = _rss_mb()
    del blocks
    assert release_freed_memory()
    assert _rss_mb() < held - 100


def test_elsewhere_it_only_collects(monkeypatch):
    import dclr.heap as heap

    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    assert release_freed_memory() is False
