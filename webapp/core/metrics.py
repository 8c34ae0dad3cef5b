"""Engine statistics as Prometheus metrics named like vLLM's (so its dashboards fit), read at scrape time."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector, CollectorRegistry

from webapp.core.runtime import get_runtime

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


class EngineCollector(Collector):
    """Gauges, counters and histograms for every loaded engine, labelled with its model name."""

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
        success = CounterMetricFamily(
            f"{PREFIX}request_success", "Finished requests by reason.", labels=[*_LABELS, "finished_reason"]
        )
        histograms = {
            key: HistogramMetricFamily(f"{PREFIX}{name}", doc, labels=_LABELS)
            for key, (name, doc) in _HISTOGRAMS.items()
        }
        for model, stats in _loaded_engines():
            labels = [model]
            running.add_metric(labels, stats.num_running)
            waiting.add_metric(labels, stats.num_waiting)
            kv_usage.add_metric(labels, stats.kv_cache_usage)
            kv_capacity.add_metric(labels, stats.kv_capacity_tokens)
            prompt_tokens.add_metric(labels, stats.prompt_tokens_total)
            generation_tokens.add_metric(labels, stats.generation_tokens_total)
            preemptions.add_metric(labels, stats.num_preemptions)
            prefix_queries.add_metric(labels, stats.prefix_cache_queries)
            prefix_hits.add_metric(labels, stats.prefix_cache_hits)
            for reason, count in sorted(stats.finished_by_reason.items()):
                success.add_metric([model, reason], count)
            for key, family in histograms.items():
                hist = stats.histograms.get(key)
                if hist is None:
                    continue
                buckets = [(_bucket_label(b), c) for b, c in zip(hist.buckets, hist.counts, strict=True)]
                if not buckets or buckets[-1][0] != "+Inf":
                    buckets.append(("+Inf", hist.count))
                family.add_metric(labels, buckets, hist.sum)
        yield from (running, waiting, kv_usage, kv_capacity, prompt_tokens, generation_tokens, preemptions)
        yield from (prefix_queries, prefix_hits, success, *histograms.values())
        yield from _model_states()


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
