"""/metrics carries django-prometheus's metrics and the engine's under vLLM-style `mooncake:*` names."""

from __future__ import annotations

import pytest
from django.test import Client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inference import SamplingParams
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.serving.metrics import EngineCollector

ENGINE_NAMES = [
    "mooncake:num_requests_running",
    "mooncake:num_requests_waiting",
    "mooncake:kv_cache_usage_perc",
    "mooncake:prompt_tokens",
    "mooncake:generation_tokens",
    "mooncake:request_success",
    "mooncake:num_preemptions",
    "mooncake:prefix_cache_hits",
    "mooncake:spec_decode_num_drafts",
    "mooncake:spec_decode_num_draft_tokens",
    "mooncake:spec_decode_num_accepted_tokens",
    "mooncake:time_to_first_token_seconds",
    "mooncake:inter_token_latency_seconds",
    "mooncake:e2e_request_latency_seconds",
    "mooncake:request_queue_time_seconds",
]


async def _run_one(engine: FakeEngine) -> None:
    async for _ in engine.generate("Hi there", SamplingParams(max_tokens=50)):
        pass


def _families(text: str) -> dict[str, object]:
    return {family.name: family for family in text_string_to_metric_families(text)}


async def test_collector_reports_engine_stats(
    fake_manager: FakeModelManager, fake_engine: FakeEngine
) -> None:
    await _run_one(fake_engine)
    registry = CollectorRegistry()
    registry.register(EngineCollector())
    text = generate_latest(registry).decode()
    families = _families(text)
    assert set(ENGINE_NAMES) <= set(families)
    assert 'mooncake:prompt_tokens_total{model_name="fake-model"} 2.0' in text
    assert 'mooncake:request_success_total{finished_reason="stop",model_name="fake-model"} 1.0' in text
    assert 'mooncake:time_to_first_token_seconds_count{model_name="fake-model"} 1.0' in text
    assert 'mooncake:e2e_request_latency_seconds_bucket{le="+Inf",model_name="fake-model"} 1.0' in text


def test_collector_without_engine_yields_empty_families() -> None:
    registry = CollectorRegistry()
    registry.register(EngineCollector())
    text = generate_latest(registry).decode()
    assert "# TYPE mooncake:num_requests_running gauge" in text
    assert "model_name=" not in text


@pytest.mark.django_db  # open /metrics reads which models are restricted
def test_metrics_endpoint_exposes_engine_and_django_metrics(
    client: Client, fake_manager: FakeModelManager
) -> None:
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    assert set(ENGINE_NAMES) <= set(_families(text))
    assert 'mooncake:num_requests_running{model_name="fake-model"} 0.0' in text
    assert "django_http_requests_total_by_method_total" in text
