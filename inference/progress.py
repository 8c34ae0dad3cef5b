"""Progress of a model load, reported from deep inside it (hashing, converting, weights, kernels, cache).

Torch-free and import-free. Whoever starts a load (the model manager) installs a callback with
`reporting(...)`; the loader's steps call `report(...)`, which reaches the callback installed in the calling
context, or nothing. A context variable rather than a parameter: the load passes through the engine registry,
the front-ends, the engine and the loader, and none of those signatures should carry a console's concern.
A load runs in one thread from start to end, so the callback installed there sees every step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

# Phases, in the order a first load of a GGUF meets them (a later load skips the conversion ones).
HASHING = "hashing the file"
CONVERTING = "converting config and tokenizer"
CONVERTING_TENSORS = "converting tensors"
PLANNING = "planning"
KERNELS = "compiling/checking kernels"
LOADING_WEIGHTS = "loading weights"
ALLOCATING = "allocating the KV cache"
STARTING = "starting the engine"


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """One step of a load: its phase and, when it counts something, how far (done of total)."""

    phase: str
    done: int | None = None
    total: int | None = None

    @property
    def fraction(self) -> float | None:
        if self.done is None or not self.total:
            return None
        return min(1.0, max(0.0, self.done / self.total))

    @property
    def label(self) -> str:
        """What a person reads: "converting tensors 120/272", or the phase alone."""
        if self.done is None or not self.total:
            return self.phase
        return f"{self.phase} {self.done}/{self.total}"


ProgressCallback = Callable[[LoadProgress], None]

_callback: ContextVar[ProgressCallback | None] = ContextVar("mooncake_load_progress", default=None)


@contextmanager
def reporting(callback: ProgressCallback) -> Iterator[None]:
    """Send the reports of what runs inside this block (in this thread) to `callback`."""
    token = _callback.set(callback)
    try:
        yield
    finally:
        _callback.reset(token)


def report(phase: str, done: int | None = None, total: int | None = None) -> None:
    """Tell whoever started this load where it is; nothing when nobody listens. Never raises: a broken
    listener must not fail the load it watches."""
    callback = _callback.get()
    if callback is None:
        return
    try:
        callback(LoadProgress(phase, done, total))
    except Exception:  # advisory: a broken listener must not fail the load
        return


class Throttled:
    """Reports a counting phase at most every `interval_s` (and always its last step), so that a loop over
    thousands of tensors or file chunks costs the listener a few calls a second, not one per item."""

    def __init__(self, phase: str, total: int | None, *, interval_s: float = 0.25) -> None:
        self.phase, self.total, self.interval_s = phase, total, interval_s
        report(phase, 0, total)
        self._last = time.monotonic()

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval_s or (self.total is not None and done >= self.total):
            self._last = now
            report(self.phase, done, self.total)
