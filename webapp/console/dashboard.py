"""The live dashboard's samples: engine stats turned into rates and percentiles, plus process figures."""

from __future__ import annotations

import datetime as dt
import statistics
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

import psutil

from webapp.accounts.models import RequestLog
from webapp.serving.gpu_probe import console_gpu as _gpu
from webapp.serving.runtime import get_runtime

HISTORY = 300  # samples kept (5 minutes at one a second)
MIN_INTERVAL = 0.9  # seconds; pollers faster than this share the latest sample


@dataclass(slots=True)
class Totals:
    generation_tokens: int = 0
    prompt_tokens: int = 0
    preemptions: int = 0
    aborts: int = 0


@dataclass(slots=True)
class Sample:
    t: float
    tokens_per_s: float
    prompt_tokens_per_s: float
    running: int
    waiting: int
    kv_usage: float  # 0..1, the fullest loaded model
    ttft_p50: float | None
    ttft_p95: float | None
    itl_p50: float | None
    itl_p95: float | None
    preemptions: int  # since the previous sample
    aborts: int  # this replica's engines' aborted requests (Stop, a client gone), since the previous sample
    # Responses since the previous sample, read from the request log that all replicas share: each replica's
    # count holds every replica's, so a total over replicas adds it once, not per replica (console.fleet).
    # Apart, because a caller's own mistakes (4xx: a bad request, a wrong key, its rate limit) say nothing
    # about the server's health, which 5xx (failures, overload) do.
    client_errors: int
    server_errors: int
    rss_mb: float
    cpu_percent: float
    gpu_mem_mb: float | None
    gpu_util: float | None


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q * 100) - 1]


def _error_counts(since: dt.datetime) -> tuple[int, int]:
    """Responses logged since `since`: (4xx, 5xx)."""
    logged = RequestLog.objects.filter(created_at__gte=since)
    return (
        logged.filter(status_code__gte=400, status_code__lt=500).count(),
        logged.filter(status_code__gte=500).count(),
    )


class Sampler:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.samples: deque[Sample] = deque(maxlen=HISTORY)
        self._totals = Totals()
        self._last_at = 0.0
        self._process = psutil.Process()
        self._process.cpu_percent()  # primes the counter; the first real reading is relative to this

    def history(self) -> list[dict[str, Any]]:
        with self._lock:
            now = time.time()
            if now - self._last_at >= MIN_INTERVAL:
                self.samples.append(self._take(now))
            return [asdict(s) for s in self.samples]

    def latest(self) -> dict[str, Any]:
        """The newest sample (taken now if the last is older than MIN_INTERVAL): a replica's heartbeat."""
        with self._lock:
            now = time.time()
            if now - self._last_at >= MIN_INTERVAL or not self.samples:
                self.samples.append(self._take(now))
            return asdict(self.samples[-1])

    def _take(self, now: float) -> Sample:
        totals, running, waiting, kv = Totals(), 0, 0, 0.0
        ttft: list[float] = []
        itl: list[float] = []
        manager = get_runtime().peek_manager()
        for info in manager.list() if manager is not None else []:
            if info.state != "loaded":
                continue
            try:
                stats = manager.peek(info.name).stats()  # type: ignore[union-attr]
            except Exception:
                continue
            totals.generation_tokens += stats.generation_tokens_total
            totals.prompt_tokens += stats.prompt_tokens_total
            totals.preemptions += stats.num_preemptions
            totals.aborts += stats.finished_by_reason.get("abort", 0)
            running += stats.num_running
            waiting += stats.num_waiting
            kv = max(kv, stats.kv_cache_usage)
            ttft.extend(stats.ttft_samples[-100:])
            itl.extend(stats.itl_samples[-200:])
        elapsed = now - self._last_at if self._last_at else 0.0
        since = dt.datetime.fromtimestamp(self._last_at or now, tz=dt.UTC)
        client_errors, server_errors = _error_counts(since) if self._last_at else (0, 0)
        prev = self._totals

        def delta(current: int, before: int) -> int:
            # An unload or restart resets an engine's counters; never show a negative rate.
            return max(0, current - before) if self._last_at else 0

        aborts = delta(totals.aborts, prev.aborts)
        gpu_mem, gpu_util = _gpu()
        sample = Sample(
            t=now,
            tokens_per_s=delta(totals.generation_tokens, prev.generation_tokens) / elapsed
            if elapsed
            else 0.0,
            prompt_tokens_per_s=delta(totals.prompt_tokens, prev.prompt_tokens) / elapsed if elapsed else 0.0,
            running=running,
            waiting=waiting,
            kv_usage=kv,
            ttft_p50=_quantile(ttft, 0.5),
            ttft_p95=_quantile(ttft, 0.95),
            itl_p50=_quantile(itl, 0.5),
            itl_p95=_quantile(itl, 0.95),
            preemptions=delta(totals.preemptions, prev.preemptions),
            aborts=aborts,
            client_errors=client_errors,
            server_errors=server_errors,
            rss_mb=self._process.memory_info().rss / 2**20,
            cpu_percent=self._process.cpu_percent(),
            gpu_mem_mb=gpu_mem,
            gpu_util=gpu_util,
        )
        self._totals, self._last_at = totals, now
        return sample
