"""Memory the process no longer uses, handed back to the OS."""

from __future__ import annotations

import ctypes


def release_free_heap() -> None:
    """Hand the heap that loading freed (conversion buffers, the warm-up's activations) back to the OS.
    glibc keeps freed memory in its arenas for reuse, so without this the server's idle RSS carries what
    the load once needed, not what it holds."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, macOS): nothing to ask
        return
    libc.malloc_trim(0)
