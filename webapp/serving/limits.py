"""Per-key and per-user limits: requests/min, tokens/min and concurrent sequences, enforced with 429s.

Chat, the API and the tokenizer endpoints all pass through one limiter, before any work is done for the
request. RateLimiter counts in this process (one replica); webapp.serving.redis_limits counts in Redis, so
that several replicas enforce one limit together. Both decide the same way and raise the same errors.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from webapp.core.errors import InvalidRequest, RateLimited

WINDOW_S = 60.0
# Concurrency frees up when some request ends; a second is a polite guess at when to retry.
CONCURRENCY_RETRY_AFTER_S = 1

Bucket = Hashable


@dataclass(frozen=True, slots=True)
class Limits:
    """Effective limits; None means unlimited."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    max_concurrent_requests: int | None = None


@dataclass
class _Counters:
    request_times: deque[float] = field(default_factory=deque)
    token_events: deque[tuple[float, int]] = field(default_factory=deque)
    active: int = 0  # sequences being generated: a request with n=4 holds four

    def prune(self, now: float) -> None:
        while self.request_times and now - self.request_times[0] >= WINDOW_S:
            self.request_times.popleft()
        while self.token_events and now - self.token_events[0][0] >= WINDOW_S:
            self.token_events.popleft()

    def tokens(self) -> int:
        return sum(n for _, n in self.token_events)


@dataclass(frozen=True, slots=True)
class Admission:
    """Proof of admission; release() it exactly once when the request ends."""

    buckets: tuple[Bucket, ...]
    weight: int = 1
    id: str = ""  # the shared store's handle on this admission's concurrency slot


class Limiter(Protocol):
    # False when a call leaves the process (a network round trip): callers on the event loop use a thread.
    local: bool

    def admit(
        self, checks: Sequence[tuple[Bucket, Limits]], *, weight: int = 1, counted: bool = True
    ) -> Admission: ...
    def add_tokens(self, admission: Admission, tokens: int) -> None: ...
    def release(self, admission: Admission) -> None: ...
    def reset(self) -> None: ...


def requests_limited(rpm: int, retry_after: float) -> RateLimited:
    return RateLimited(
        f"Rate limit reached: {rpm} requests per minute.", retry_after=retry_after, code="requests_per_minute"
    )


def tokens_limited(tpm: int, retry_after: float) -> RateLimited:
    return RateLimited(
        f"Rate limit reached: {tpm} tokens per minute.", retry_after=retry_after, code="tokens_per_minute"
    )


def concurrency_limited(cap: int) -> RateLimited:
    return RateLimited(
        f"Too many concurrent requests (limit {cap}).",
        retry_after=CONCURRENCY_RETRY_AFTER_S,
        code="concurrent_requests",
    )


def never_fits(weight: int, cap: int) -> InvalidRequest:
    # Waiting would never help: a client error, not a 429 to retry.
    return InvalidRequest(
        f"This request asks for {weight} sequences at once; this account may run at most {cap}.",
        param="n",
        code="concurrent_requests",
    )


class RateLimiter:
    """The in-process limiter: one replica's counters."""

    local = True

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._counters: dict[Bucket, _Counters] = {}

    def admit(
        self, checks: Sequence[tuple[Bucket, Limits]], *, weight: int = 1, counted: bool = True
    ) -> Admission:
        """Admit one request of `weight` sequences against every bucket at once, or raise RateLimited and
        admit none. A weight of 0 counts the request but holds no concurrency (a tokenizer call); with
        `counted` False it is not one of the caller's requests either (a chat title the server asks for)."""
        with self._lock:
            now = self._clock()
            for bucket, limits in checks:
                self._check(self._counters.setdefault(bucket, _Counters()), limits, now, weight)
            for bucket, _ in checks:
                counters = self._counters[bucket]
                if counted:
                    counters.request_times.append(now)
                counters.active += weight
            return Admission(buckets=tuple(b for b, _ in checks), weight=weight)

    def _check(self, c: _Counters, limits: Limits, now: float, weight: int) -> None:
        c.prune(now)
        rpm = limits.requests_per_minute
        if rpm is not None and len(c.request_times) >= rpm:
            oldest = c.request_times[len(c.request_times) - rpm] if rpm else now
            raise requests_limited(rpm, oldest + WINDOW_S - now)
        tpm = limits.tokens_per_minute
        if tpm is not None and c.tokens() >= tpm:
            # Wait until enough tokens leave the window to get back under the limit.
            excess, wait = c.tokens() - tpm, WINDOW_S
            for t, n in c.token_events:
                excess -= n
                if excess < 0:
                    wait = t + WINDOW_S - now
                    break
            raise tokens_limited(tpm, wait)
        cap = limits.max_concurrent_requests
        if cap and weight > cap:
            raise never_fits(weight, cap)
        if cap is not None and weight and c.active + weight > cap:
            raise concurrency_limited(cap)

    def add_tokens(self, admission: Admission, tokens: int) -> None:
        if tokens <= 0:
            return
        with self._lock:
            now = self._clock()
            for bucket in admission.buckets:
                self._counters.setdefault(bucket, _Counters()).token_events.append((now, tokens))

    def release(self, admission: Admission) -> None:
        with self._lock:
            for bucket in admission.buckets:
                counters = self._counters.get(bucket)
                if counters is not None:
                    counters.active = max(0, counters.active - admission.weight)

    def reset(self) -> None:
        with self._lock:
            self._counters.clear()
