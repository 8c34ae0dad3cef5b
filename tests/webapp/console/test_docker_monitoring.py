"""docker/grafana-dashboard.json and docker/prometheus.yml: valid, every replica scraped; every metric they
chart is on /metrics."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from inference import SamplingParams
from webapp.serving import gpu_probe
from webapp.serving.gpu_probe import GpuReading

DOCKER = Path(__file__).resolve().parents[3] / "docker"
METRIC = re.compile(r"\b((?:mooncake:|mooncake_|process_|django_)[A-Za-z0-9_:]+)")
SELECTOR = re.compile(r"\b((?:mooncake:|mooncake_|process_|django_)[A-Za-z0-9_:]+)\{([^}]*)\}")
MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
SUFFIXES = ("_bucket", "_sum", "_count")
# Names dashboards written for Mooncake expect, beside vLLM's.
GUIDE_NAMES = {
    "mooncake_request_duration_seconds_bucket",
    "mooncake_tokens_generated_per_second",
    "mooncake_gpu_utilization",
    "mooncake_vram_usage_bytes",
}
TARGET_LABELS = {"job", "instance"}  # Prometheus adds these to every scraped sample


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((DOCKER / "grafana-dashboard.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 15
    return exprs


def dashboard_metrics() -> set[str]:
    return {m for e in dashboard_exprs() for m in METRIC.findall(e)}


async def _one_request(engine: Any) -> None:
    async for _ in engine.generate("hi", SamplingParams(max_tokens=2)):
        pass


def test_scrape_config_scrapes_every_replica() -> None:
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text(encoding="utf-8"))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "mooncake")
    assert job["metrics_path"] == "/metrics"
    # One target per A record of the compose service, not `web:8000` (one replica at random per scrape).
    assert "static_configs" not in job
    assert job["dns_sd_configs"] == [{"names": ["web"], "type": "A", "port": 8000, "refresh_interval": "15s"}]
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    assert "web" in compose["services"]
    assert "8000" in compose["services"]["web"]["command"]


def test_gpu_replicas_each_get_their_own_gpu_and_answer_as_web() -> None:
    """Prometheus and nginx find replicas as `web`; `count: 1` would put every replica on GPU 0."""
    gpu = yaml.safe_load((DOCKER / "compose.gpu.yaml").read_text(encoding="utf-8"))["services"]
    devices = []
    for name, service in gpu.items():
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert "count" not in device and service["deploy"]["replicas"] == 1
        devices += device["device_ids"]
        assert name == "web" or "web" in service["networks"]["default"]["aliases"]
    assert len(devices) == len(set(devices)) >= 2


def test_dashboard_charts_the_guide_names() -> None:
    missing = GUIDE_NAMES - dashboard_metrics()
    assert not missing, f"not charted: {sorted(missing)}"


def test_every_charted_metric_is_exported(manager: Any, db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine has no GPU: a probe that reads one, so the GPU panels' metrics have samples too.
    monkeypatch.setattr(gpu_probe, "read_devices", lambda: [GpuReading(0, 50.0, 2**30)])
    engine = manager.load("base")
    asyncio.run(_one_request(engine))  # so the per-reason counter has a sample
    client = Client()
    client.get("/health")
    client.get("/no-such-page")  # a 404 so the per-status counter has a sample
    exposed = client.get("/metrics").content.decode()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposed):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    missing = {
        m for m in dashboard_metrics() if m not in labels and not any(m + s in labels for s in SUFFIXES)
    }
    assert not missing, f"charted but not exported: {sorted(missing)}"
    # A selector on a label the metric lacks matches nothing: the panel would stay empty without an error.
    wrong = {
        (name, label)
        for expr in dashboard_exprs()
        for name, matchers in SELECTOR.findall(expr)
        for label in MATCHER.findall(matchers)
        if label not in labels.get(name, set()) | TARGET_LABELS
    }
    assert not wrong, f"charted with labels the metric lacks: {sorted(wrong)}"


def test_prometheus_sends_the_token_production_settings_require() -> None:
    """Production settings refuse /metrics without MOONCAKE_METRICS_TOKEN: compose gives the replicas and
    Prometheus the same token, and the scrape job reads it from the file the container writes at start."""
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text(encoding="utf-8"))
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "mooncake")
    token_file = job["authorization"]["credentials_file"]
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    services = compose["services"]
    assert "MOONCAKE_METRICS_TOKEN" in services["web"]["environment"]
    prometheus = services["prometheus"]
    assert "MOONCAKE_METRICS_TOKEN" in prometheus["environment"]
    assert f"> {token_file} &&" in " ".join(prometheus["entrypoint"])
