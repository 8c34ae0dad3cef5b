"""The one way a native kernel is made ready: its library built and loaded once per process, then its
self-check run once per setting, and on any failure a log line and None, which the caller's plan turns
into its fallback (dense weights, oneDNN, registers).

Every CPU kernel goes through `checked_kernel`: the AVX512 block kernels (quantization/gguf/avx512.py),
the AVX2 ones (quantization/gguf/avx2.py), the AMX tile linears (quantization/amx_tiles.py) and oneDNN's
packed linears (quantization/onednn.py, torch's own ops: no library to load).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import TypeVar

import torch

from inference.models.kernels.build import Library, ensure_built

logger = logging.getLogger(__name__)

T = TypeVar("T")
# What a kernel's build, load or check may raise; anything else is a bug and propagates.
KERNEL_ERRORS = (RuntimeError, OSError, ImportError, AttributeError)

_lock = threading.RLock()
_loaded: dict[str, Path] = {}  # library stem -> the file this process loaded (a namespace loads once)
_checked: dict[Hashable, object] = {}  # kernel key -> its checked handle, or None where it failed


def load_library(library: Library, cache_dir: Path, *, compiler: str = "c++") -> Path:
    """The file of `library` this process loaded, built into `cache_dir` first if needed. Raises what
    building or loading raises (KERNEL_ERRORS); `checked_kernel` turns that into a fallback."""
    with _lock:
        if library.stem not in _loaded:
            path = ensure_built(cache_dir, compiler=compiler, library=library)
            torch.ops.load_library(str(path))
            _loaded[library.stem] = path
        return _loaded[library.stem]


def checked_kernel(
    key: Hashable,
    make: Callable[[], T],
    check: Callable[[T], bool],
    *,
    what: str,
    fallback: str,
    library: Library | None = None,
    cache_dir: Path | None = None,
    compiler: str = "c++",
) -> T | None:
    """The kernel handle `make()` returns once `library` (if any) is loaded and `check(handle)` passed,
    made and checked once per process and `key`; None, with a warning naming `what` and the `fallback`,
    where building, loading or the check fails (a failed check is remembered; a failed build is tried
    again on the next call, as a compiler may be installed meanwhile)."""
    with _lock:
        if key in _checked:
            return _checked[key]  # type: ignore[return-value]
        try:
            if library is not None:
                if cache_dir is None:
                    raise ValueError(f"{library.stem} needs a cache folder to be built into")
                load_library(library, cache_dir, compiler=compiler)
            handle = make()
            passed = check(handle)
        except KERNEL_ERRORS as exc:
            logger.warning("%s unavailable (%s); %s", what, exc, fallback)
            return None
        if not passed:
            logger.warning("%s disagrees with its reference; %s", what, fallback)
        _checked[key] = handle if passed else None
        return _checked[key]  # type: ignore[return-value]


def forget_checks() -> None:
    """Tests: run every self-check again on next use (a loaded library stays loaded)."""
    with _lock:
        _checked.clear()
