"""Engine statistics as Prometheus metrics named like vLLM's (so its dashboards fit), read at scrape time.

Beside the `mooncake:*` names, four `mooncake_*` names that dashboards written for them expect:
`mooncake_request_duration_seconds` (the e2e latency histogram again), `mooncake_tokens_generated_per_second`,
`mooncake_gpu_utilization` and `mooncake_vram_usage_bytes` (the GPU two have no samples off CUDA).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from webapp.serving import gpu_probe
from webapp.serving.runtime import get_runtime

if TYPE_CHECKING:
    from inference.metrics import Histogram

logger = logging.getLogger(__name__)

PREFIX = "mooncake:"
_LABELS = ["model_name"]
# stats.histograms key -> (metric name, help)
_HISTOGRAMS = {
    "ttft": ("time_to_first_token_seconds", "Time from arrival to the first generated token."),
    "itl": ("inter_token_latency_seconds", "Time between consecutive generated tokens."),
    "e2e_latency": ("e2e_request_latency_seconds", "Time from arrival to the end of the request."),
    "queue_time": ("request_queue_time_seconds", "Time a request waited before it was first scheduled."),
}


def _loaded_engines() -> Iterator[tuple[str, Any]]:
    manager = get_runtime().peek_manager()
    if manager is None:
        return
    for info in manager.list():
        if info.state != "loaded":
            continue
        try:
            yield info.name, manager.peek(info.name).stats()
        except Exception:
            # Unloaded between list() and get(): it simply has no sample in this scrape.
            logger.debug("No stats for %s", info.name, exc_info=True)


def _bucket_label(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(float(bound))


def _add_histogram(family: HistogramMetricFamily, labels: list[str], hist: Histogram) -> None:
    buckets = [(_bucket_label(b), c) for b, c in zip(hist.buckets, hist.counts, strict=True)]
    if not buckets or buckets[-1][0] != "+Inf":
        buckets.append(("+Inf", hist.count))
    family.add_metric(labels, buckets, hist.sum)


TOKEN_RATE_WINDOW_S = 10.0
_MAX_RATE_SAMPLES = 256  # bounds memory under a scraper gone wild; the rate then spans fewer seconds


class TokenRate:
    """Generation tokens per second per model over about the last TOKEN_RATE_WINDOW_S seconds.

    The engine keeps only a running total, so each scrape records (time, total) and the rate is taken
    from the newest earlier record at least a window old: 10-15 s at the shipped 5 s scrape interval,
    the whole gap when scrapes are further apart, and 0 on a model's first scrape. Every scraper feeds
    the same records, so a second scraper does not shorten anyone's window below TOKEN_RATE_WINDOW_S.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # scrapes may run on several threads at once
        self._history: dict[str, deque[tuple[float, int]]] = {}

    def update(self, totals: dict[str, int]) -> dict[str, float]:
        rates: dict[str, float] = {}
        with self._lock:
            now = self._clock()  # inside the lock, so records stay in time order
            for model in set(self._history) - set(totals):
                del self._history[model]  # unloaded: a later load starts afresh
            for model, total in totals.items():
                history = self._history.setdefault(model, deque(maxlen=_MAX_RATE_SAMPLES))
                if history and total < history[-1][1]:
                    history.clear()  # the engine restarted and its counter with it
                history.append((now, total))
                while len(history) > 1 and history[1][0] <= now - TOKEN_RATE_WINDOW_S:
                    history.popleft()
                since, before = history[0]
                rates[model] = (total - before) / (now - since) if now > since else 0.0
        return rates


class EngineCollector(Collector):
    """Gauges, counters and histograms for every loaded engine, labelled with its model name."""

    def __init__(self) -> None:
        self.token_rate = TokenRate()

    def collect(self) -> Iterable[Metric]:
        running = GaugeMetricFamily(
            f"{PREFIX}num_requests_running", "Requests in the running batch.", labels=_LABELS
        )
        waiting = GaugeMetricFamily(
            f"{PREFIX}num_requests_waiting", "Requests waiting to be scheduled.", labels=_LABELS
        )
        kv_usage = GaugeMetricFamily(
            f"{PREFIX}kv_cache_usage_perc", "Fraction of KV-cache blocks in use (0..1).", labels=_LABELS
        )
        kv_capacity = GaugeMetricFamily(
            f"{PREFIX}kv_cache_capacity_tokens", "Tokens the KV cache can hold.", labels=_LABELS
        )
        prompt_tokens = CounterMetricFamily(
            f"{PREFIX}prompt_tokens", "Prefill tokens processed.", labels=_LABELS
        )
        generation_tokens = CounterMetricFamily(
            f"{PREFIX}generation_tokens", "Tokens generated.", labels=_LABELS
        )
        preemptions = CounterMetricFamily(f"{PREFIX}num_preemptions", "Sequences preempted.", labels=_LABELS)
        prefix_queries = CounterMetricFamily(
            f"{PREFIX}prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", labels=_LABELS
        )
        prefix_hits = CounterMetricFamily(
            f"{PREFIX}prefix_cache_hits", "Prompt tokens found in the prefix cache.", labels=_LABELS
        )
        spec_drafts = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_drafts", "Speculative drafts verified.", labels=_LABELS
        )
        spec_draft_tokens = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_draft_tokens", "Speculative draft tokens verified.", labels=_LABELS
        )
        spec_accepted = CounterMetricFamily(
            f"{PREFIX}spec_decode_num_accepted_tokens", "Speculative draft tokens accepted.", labels=_LABELS
        )
        success = CounterMetricFamily(
            f"{PREFIX}request_success", "Finished requests by reason.", labels=[*_LABELS, "finished_reason"]
        )
        histograms = {
            key: HistogramMetricFamily(f"{PREFIX}{name}", doc, labels=_LABELS)
            for key, (name, doc) in _HISTOGRAMS.items()
        }
        request_duration = HistogramMetricFamily(
            "mooncake_request_duration_seconds",
            "Time from arrival to the end of the request (the observations of "
            f"{PREFIX}e2e_request_latency_seconds).",
            labels=["model"],
        )
        generated_totals: dict[str, int] = {}
        for model, stats in _loaded_engines():
            labels = [model]
            generated_totals[model] = stats.generation_tokens_total
            running.add_metric(labels, stats.num_running)
            waiting.add_metric(labels, stats.num_waiting)
            kv_usage.add_metric(labels, stats.kv_cache_usage)
            kv_capacity.add_metric(labels, stats.kv_capacity_tokens)
            prompt_tokens.add_metric(labels, stats.prompt_tokens_total)
            generation_tokens.add_metric(labels, stats.generation_tokens_total)
            preemptions.add_metric(labels, stats.num_preemptions)
            prefix_queries.add_metric(labels, stats.prefix_cache_queries)
            prefix_hits.add_metric(labels, stats.prefix_cache_hits)
            spec_drafts.add_metric(labels, stats.spec_decode_num_drafts)
            spec_draft_tokens.add_metric(labels, stats.spec_decode_num_draft_tokens)
            spec_accepted.add_metric(labels, stats.spec_decode_num_accepted_tokens)
            for reason, count in sorted(stats.finished_by_reason.items()):
                success.add_metric([model, reason], count)
            for key, family in histograms.items():
                hist = stats.histograms.get(key)
                if hist is not None:
                    _add_histogram(family, labels, hist)
            e2e = stats.histograms.get("e2e_latency")
            if e2e is not None:
                _add_histogram(request_duration, labels, e2e)
        tokens_per_second = GaugeMetricFamily(
            "mooncake_tokens_generated_per_second",
            f"Tokens generated per second over about the last {TOKEN_RATE_WINDOW_S:g} s "
            "(since the newest scrape at least that old).",
            labels=["model"],
        )
        for model, rate in sorted(self.token_rate.update(generated_totals).items()):
            tokens_per_second.add_metric([model], rate)
        yield from (running, waiting, kv_usage, kv_capacity, prompt_tokens, generation_tokens, preemptions)
        yield from (prefix_queries, prefix_hits, spec_drafts, spec_draft_tokens, spec_accepted)
        yield from (success, *histograms.values())
        yield from (request_duration, tokens_per_second)
        yield from _gpu_metrics()
        yield from _model_states()


def _gpu_metrics() -> Iterator[Metric]:
    """Per CUDA device this process uses; no samples on CPU or before an engine puts anything on a GPU."""
    utilization = GaugeMetricFamily(
        "mooncake_gpu_utilization",
        "Percent of time a kernel ran on the GPU (NVML, device-wide; 0-100). No samples off CUDA.",
        labels=["device"],
    )
    vram = GaugeMetricFamily(
        "mooncake_vram_usage_bytes",
        "Bytes this process's PyTorch tensors hold on the GPU. No samples off CUDA.",
        labels=["device"],
    )
    try:
        readings = gpu_probe.read_devices()
    except Exception:
        # A scrape must answer even when the driver misbehaves: the GPU figures are simply missing.
        logger.debug("GPU probe failed", exc_info=True)
        readings = []
    for reading in readings:
        device = [str(reading.index)]
        if reading.utilization is not None:
            utilization.add_metric(device, reading.utilization)
        vram.add_metric(device, reading.vram_bytes)
    yield utilization
    yield vram


def _model_states() -> Iterator[Metric]:
    """Every registered model's state (1 for the current one) and its automatic restarts after crashes."""
    state = GaugeMetricFamily(
        f"{PREFIX}model_state", "1 for the model's current state.", labels=[*_LABELS, "state"]
    )
    restarts = CounterMetricFamily(
        f"{PREFIX}engine_restarts", "Automatic engine restarts after a crash.", labels=_LABELS
    )
    manager = get_runtime().peek_manager()
    for info in manager.list() if manager is not None else []:
        state.add_metric([info.name, str(info.state)], 1)
        restarts.add_metric([info.name], int(info.restarts))
    yield state
    yield restarts


_registered: EngineCollector | None = None


def register_engine_collector(registry: CollectorRegistry = REGISTRY) -> EngineCollector:
    """Register once per process (AppConfig.ready can run more than once under test runners)."""
    global _registered
    if _registered is None:
        _registered = EngineCollector()
        registry.register(_registered)
    return _registered
