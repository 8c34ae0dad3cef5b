"""AdmissionGate: how long an idle engine holds its first step so that a burst of requests shares it.

Prefilling whichever request of a burst arrived first on its own makes the rest queue behind a whole step
(~100 ms on CPU). So once work reaches an idle engine, admission waits while callers announced by
`expect()` are still preparing, or while submissions keep coming at most `gap_s` apart, and never longer
than `max_s` after the first of them. A lone, unannounced request pays one gap.

The gate only keeps time; the engine loop asks it `hold_s(now)` and sleeps on its own condition.
"""

from __future__ import annotations

import threading


class _Notice:
    """A caller's announcement that it is preparing a request (AdmissionGate.expect)."""

    __slots__ = ("_gate",)

    def __init__(self, gate: AdmissionGate) -> None:
        self._gate = gate

    def __enter__(self) -> _Notice:
        with self._gate._lock:
            self._gate._notices.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._gate._lock:
            self._gate._notices.discard(self)  # already gone if a submission took it


class AdmissionGate:
    """Thread-safe. Callers announce (`expect`) and report submissions (`arrived`); the loop asks `hold_s`."""

    def __init__(self, *, gap_s: float = 0.002, max_s: float = 0.05) -> None:
        if gap_s < 0 or max_s < 0:
            raise ValueError("gap_s and max_s must be >= 0")
        self.gap_s = gap_s
        self.max_s = max_s
        self._lock = threading.Lock()
        self._notices: set[_Notice] = set()
        self._first: float | None = None  # first submission since admission last opened
        self._last = 0.0

    @property
    def announced(self) -> int:
        """Callers preparing a request they have not submitted yet."""
        with self._lock:
            return len(self._notices)

    def expect(self) -> _Notice:
        """Context manager a caller holds while it prepares a request; submitting takes one notice."""
        return _Notice(self)

    def arrived(self, now: float) -> None:
        """A request was submitted at `now` (monotonic seconds)."""
        with self._lock:
            if self._notices:
                self._notices.pop()
            if self._first is None:
                self._first = now
            self._last = now

    def hold_s(self, now: float) -> float:
        """With the engine idle: seconds to keep admission closed (at most gap_s at a time); 0 to admit."""
        with self._lock:
            if self._first is None:
                return 0.0
            left = self._first + self.max_s - now
            if not self._notices:  # only the quiet gap since the last submission may still hold
                left = min(left, self._last + self.gap_s - now)
            return max(0.0, min(left, self.gap_s))

    def opened(self) -> None:
        """The engine took the submissions so far: the next ones start a new burst."""
        with self._lock:
            self._first = None
