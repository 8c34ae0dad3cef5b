"""The native CPU library (csrc/, built by kernel_build.py), loaded once per process.

One library holds every native op (q4_linear, decode_layers, prompt_attention, tile_linear); an op library
registers only once per process, so whichever kernel asks first loads it for all.
"""

from __future__ import annotations

import threading
from pathlib import Path

import torch

_lock = threading.Lock()
_loaded: Path | None = None


def load_library(cache_dir: Path, *, compiler: str = "c++") -> Path:
    """The library this process loaded, built into `cache_dir` first if needed. Raises what building or
    loading raises (OSError, RuntimeError, ImportError); callers turn that into their fallback."""
    # Imported here: kernel_build is also `python -m`'s entry point, which must not find it imported yet.
    from inference.models import kernel_build

    global _loaded
    with _lock:
        if _loaded is None:
            library = kernel_build.ensure_built(cache_dir, compiler=compiler)
            torch.ops.load_library(str(library))
            _loaded = library
        return _loaded
