"""/metrics also carries the `mooncake_*` names dashboards expect: request duration, tokens/s, GPU figures."""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inference import SamplingParams
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.serving import gpu_probe
from webapp.serving.gpu_probe import GpuReading
from webapp.serving.metrics import TOKEN_RATE_WINDOW_S, EngineCollector, TokenRate, register_engine_collector


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    """The collector /metrics uses, with a fresh token-rate record driven by a clock the test moves."""
    fake = FakeClock()
    monkeypatch.setattr(register_engine_collector(), "token_rate", TokenRate(clock=fake))
    return fake


async def _run_one(engine: FakeEngine, max_tokens: int = 50) -> None:
    async for _ in engine.generate("Hi there", SamplingParams(max_tokens=max_tokens)):
        pass


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples called exactly `name` (a family's _bucket/_count/... included), keyed by sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                found[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def _scrape(client: Client) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


async def test_request_duration_matches_the_e2e_histogram(
    fake_manager: FakeModelManager, fake_engine: FakeEngine
) -> None:
    await _run_one(fake_engine)
    # Spread observations over several buckets, so matching bucket by bucket means something.
    for seconds in (0.05, 0.5, 0.5, 5.0, 50.0):
        fake_engine.stats().histograms["e2e_latency"].observe(seconds)
    registry = CollectorRegistry()
    registry.register(EngineCollector())
    text = generate_latest(registry).decode()

    guide = _samples(text, "mooncake_request_duration_seconds_bucket")
    vllm = _samples(text, "mooncake:e2e_request_latency_seconds_bucket")
    assert guide, "no request duration buckets"
    by_le = {dict(k)["le"]: v for k, v in guide.items()}
    assert by_le == {dict(k)["le"]: v for k, v in vllm.items()}
    assert by_le == {"0.01": 1.0, "0.1": 2.0, "1.0": 4.0, "10.0": 5.0, "+Inf": 6.0}
    assert {dict(k)["model"] for k in guide} == {"fake-model"}
    assert _samples(text, "mooncake_request_duration_seconds_count") == {(("model", "fake-model"),): 6.0}
    [total] = _samples(text, "mooncake:e2e_request_latency_seconds_sum").values()
    assert _samples(text, "mooncake_request_duration_seconds_sum") == {(("model", "fake-model"),): total}
    assert "# HELP mooncake_request_duration_seconds Time from arrival to the end of the request" in text


@pytest.mark.django_db  # open /metrics reads which models are restricted
def test_metrics_endpoint_shows_request_duration(client: Client, fake_manager: FakeModelManager) -> None:
    text = _scrape(client)
    assert 'mooncake_request_duration_seconds_bucket{le="+Inf",model="fake-model"} 0.0' in text
    assert "# TYPE mooncake_request_duration_seconds histogram" in text


@pytest.mark.django_db  # open /metrics reads which models are restricted
def test_tokens_per_second_follows_generation(
    client: Client, fake_manager: FakeModelManager, fake_engine: FakeEngine, clock: FakeClock
) -> None:
    rate = 'mooncake_tokens_generated_per_second{model="fake-model"}'
    assert f"{rate} 0.0" in _scrape(client)  # the first scrape has nothing to compare with
    clock.now += 5
    asyncio.run(_run_one(fake_engine, max_tokens=4))
    generated = fake_engine.stats().generation_tokens_total
    assert generated == 4
    text = _scrape(client)
    assert f"{rate} {generated / 5}" in text

    clock.now += 5  # still inside the window: the same tokens over 10 s
    assert f"{rate} {generated / 10}" in _scrape(client)

    clock.now += TOKEN_RATE_WINDOW_S  # a whole window with nothing generated
    assert f"{rate} 0.0" in _scrape(client)
    assert "# HELP mooncake_tokens_generated_per_second Tokens generated per second" in text


def test_token_rate_forgets_restarts_and_unloads() -> None:
    clock = FakeClock()
    rate = TokenRate(clock=clock)
    assert rate.update({"m": 100}) == {"m": 0.0}
    clock.now += 5
    assert rate.update({"m": 150}) == {"m": 10.0}
    clock.now += 5
    assert rate.update({"m": 20}) == {"m": 0.0}  # the counter restarted: never a negative rate
    clock.now += 2
    assert rate.update({"m": 40}) == {"m": 10.0}
    assert rate.update({}) == {}
    clock.now += 1
    assert rate.update({"m": 1000}) == {"m": 0.0}  # loaded again: no rate across the gap


# ---- GPU figures ------------------------------------------------------------------------------------------


@pytest.mark.django_db  # open /metrics reads which models are restricted
def test_gpu_metrics_have_no_samples_on_this_cpu_machine(
    client: Client, fake_manager: FakeModelManager
) -> None:
    text = _scrape(client)
    assert "# HELP mooncake_gpu_utilization" in text
    assert "# HELP mooncake_vram_usage_bytes" in text
    assert not _samples(text, "mooncake_gpu_utilization")
    assert not _samples(text, "mooncake_vram_usage_bytes")


@pytest.mark.django_db  # open /metrics reads which models are restricted
def test_gpu_metrics_per_device(
    client: Client, fake_manager: FakeModelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    readings = [GpuReading(0, 87.0, 3 * 2**30), GpuReading(1, None, 512)]
    monkeypatch.setattr(gpu_probe, "read_devices", lambda: readings)
    text = _scrape(client)
    assert _samples(text, "mooncake_gpu_utilization") == {(("device", "0"),): 87.0}  # no NVML on 1
    assert _samples(text, "mooncake_vram_usage_bytes") == {
        (("device", "0"),): float(3 * 2**30),
        (("device", "1"),): 512.0,
    }


@pytest.mark.django_db  # open /metrics reads which models are restricted
def test_a_failing_probe_does_not_fail_the_scrape(
    client: Client, fake_manager: FakeModelManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> list[GpuReading]:
        raise RuntimeError("NVML: driver/library version mismatch")

    monkeypatch.setattr(gpu_probe, "read_devices", broken)
    text = _scrape(client)
    assert 'mooncake:num_requests_running{model_name="fake-model"}' in text
    assert not _samples(text, "mooncake_gpu_utilization")


class FakeCuda:
    """torch.cuda's surface the probe reads; device 1's NVML query fails."""

    def __init__(self, initialized: bool = True) -> None:
        self.initialized = initialized

    def is_initialized(self) -> bool:
        return self.initialized

    def device_count(self) -> int:
        return 2

    def memory_allocated(self, device: int) -> int:
        return [1000, 2000][device]

    def utilization(self, device: int) -> int:
        if device == 1:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return 42


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    torch = types.SimpleNamespace(cuda=FakeCuda())
    monkeypatch.setitem(sys.modules, "torch", torch)
    yield torch


def test_probe_reads_each_device_and_survives_nvml_errors(fake_torch: Any) -> None:
    assert gpu_probe.read_devices() == [GpuReading(0, 42.0, 1000), GpuReading(1, None, 2000)]


def test_probe_reports_nothing_before_cuda_is_in_use(fake_torch: Any) -> None:
    fake_torch.cuda.initialized = False
    assert gpu_probe.read_devices() == []


class TorchImports:
    """A finder that records, and refuses, every attempt to import torch."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torch" or name.startswith("torch."):
            self.attempts.append(name)
            raise ImportError(f"{name} imported during a scrape")


def test_a_scrape_without_an_engine_does_not_import_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    # Other tests imported torch already: take it out of sys.modules for this test, and catch any import
    # (the collector swallows errors, so a refused import must be recorded, not just raised).
    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.delitem(sys.modules, name)
    imports = TorchImports()
    monkeypatch.setattr(sys, "meta_path", [imports, *sys.meta_path])
    registry = CollectorRegistry()
    registry.register(EngineCollector())
    text = generate_latest(registry).decode()
    assert "# TYPE mooncake_gpu_utilization gauge" in text
    assert imports.attempts == []
