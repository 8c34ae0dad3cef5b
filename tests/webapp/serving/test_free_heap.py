"""After a load, the heap that loading freed goes back to the OS (webapp.serving.runtime.release_free_heap):
glibc keeps freed blocks in its arenas, so without it idle RSS carries what the load once needed."""

from __future__ import annotations

import ctypes.util

import psutil
import pytest

from webapp.serving.heap import release_free_heap

MIB = 1 << 20


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="needs a C library")
def test_freed_heap_between_live_blocks_is_returned() -> None:
    process = psutil.Process()
    # Blocks under glibc's mmap threshold land in the heap; every 200th stays alive, so the freed space
    # lies between live blocks, where freeing alone never shrinks the heap.
    chunks = [bytearray(60_000) for _ in range(4000)]
    for chunk in chunks:
        chunk[::4096] = b"x" * len(chunk[::4096])  # touched: resident
    kept = chunks[::200]
    del chunks
    held = process.memory_info().rss
    release_free_heap()
    after = process.memory_info().rss
    assert len(kept) == 20
    assert held - after > 150 * MIB, f"RSS {held / MIB:.0f} -> {after / MIB:.0f} MiB"
