"""The request log's filters and prompt privacy; the dashboard's samples; the jobs and audit pages."""

from __future__ import annotations

import asyncio
import time

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from inference import ModelManager, SamplingParams
from tests.webapp.console.conftest import SizedFakeEngine
from webapp.accounts.models import RequestLog
from webapp.console import dashboard
from webapp.console.templatetags import console as console_filters
from webapp.core.models import EngineSettings
from webapp.serving.runtime import get_runtime


@pytest.fixture
def log_rows(plain: User, staff: User) -> None:
    common = {"endpoint": "/v1/chat/completions", "duration_s": 0.5, "prompt_text": "SECRET PROMPT"}
    RequestLog.objects.create(user=plain, model="smol", status_code=200, completion_tokens=40, ttft_s=0.2,
                              finish_reason="stop", **common)  # fmt: skip
    RequestLog.objects.create(user=staff, model="other", status_code=429, error="rate limited",
                              request_id="0f3c9a5e2b7d4e1f", **common)  # fmt: skip
    RequestLog.objects.create(user=plain, model="smol", status_code=200, completion_tokens=5, ttft_s=1.5,
                              finish_reason="length", **common)  # fmt: skip


def rows(client: Client, **params: str) -> int:
    html = client.get(reverse("console:requests"), params, headers={"HX-Request": "true"}).content.decode()
    return html.count("<tr class=")


@pytest.mark.database
@pytest.mark.parametrize(
    ("params", "count"),
    [
        ({}, 3),
        ({"user": "pat"}, 2),
        ({"model": "other"}, 1),
        ({"status": "error"}, 1),
        ({"status": "429"}, 1),
        ({"status": "ok"}, 2),
        ({"finish_reason": "length"}, 1),
        ({"min_tokens": "10"}, 1),
        ({"min_ttft_s": "1"}, 1),
        ({"min_duration_s": "1"}, 0),
        ({"user": "pat", "finish_reason": "stop"}, 1),
        ({"request_id": "0f3c9a5e2b7d4e1f"}, 1),  # the id an error message quotes
        ({"request_id": " 0f3c9a5e2b7d4e1f "}, 1),
        ({"request_id": "0f3c9a5e"}, 0),  # exact, not a prefix: one request's row
    ],
)
def test_filters(staff_client: Client, log_rows: None, params: dict[str, str], count: int) -> None:
    assert rows(staff_client, **params) == count


@pytest.mark.database
def test_prompt_text_only_when_enabled(staff_client: Client, log_rows: None) -> None:
    page = staff_client.get(reverse("console:requests")).content.decode()
    assert "SECRET PROMPT" not in page and "Prompt text is not stored" in page
    EngineSettings.objects.create(log_prompts=True)
    assert "SECRET PROMPT" in staff_client.get(reverse("console:requests")).content.decode()


async def _generate(engine: SizedFakeEngine, n: int) -> None:
    for _ in range(n):
        async for _output in engine.generate("hi", SamplingParams(max_tokens=4)):
            pass


def test_dashboard_samples(staff_client: Client, manager: ModelManager) -> None:
    # The runtime is fresh for each test, and so is its sampler.
    engine = manager.load("base")
    first = staff_client.get(reverse("console:dashboard-data")).json()["samples"]
    assert len(first) == 1 and first[0]["tokens_per_s"] == 0.0 and first[0]["rss_mb"] > 10
    asyncio.run(_generate(engine, 3))  # type: ignore[arg-type]
    RequestLog.objects.create(endpoint="/v1/completions", status_code=503, duration_s=0.1)
    time.sleep(dashboard.MIN_INTERVAL)
    samples = staff_client.get(reverse("console:dashboard-data")).json()["samples"]
    last = samples[-1]
    assert len(samples) == 2
    assert last["tokens_per_s"] > 0 and last["ttft_p50"] is not None
    assert (last["server_errors"], last["client_errors"]) == (1, 0)
    for key in (
        "running",
        "waiting",
        "kv_usage",
        "ttft_p95",
        "itl_p50",
        "itl_p95",
        "preemptions",
        "cpu_percent",
    ):
        assert key in last
    # Polls closer together than MIN_INTERVAL share the latest sample.
    assert len(staff_client.get(reverse("console:dashboard-data")).json()["samples"]) == 2


def test_dashboard_page_loads_vendored_uplot(staff_client: Client, manager: ModelManager) -> None:
    html = staff_client.get(reverse("console:dashboard")).content.decode()
    assert "console/vendor/uPlot.iife.min.js" in html and 'data-chart="ttft"' in html
    assert reverse("console:dashboard-data") in html


def test_quantiles() -> None:
    assert dashboard._quantile([], 0.5) is None
    assert dashboard._quantile([2.0], 0.95) == 2.0
    values = [float(i) for i in range(1, 101)]
    assert dashboard._quantile(values, 0.5) == pytest.approx(50.5, abs=0.6)
    assert dashboard._quantile(values, 0.95) == pytest.approx(95, abs=1)


@pytest.mark.database
def test_audit_page_filters(staff_client: Client, manager: ModelManager) -> None:
    staff_client.post(reverse("console:model-default", args=["base"]))
    page = staff_client.get(reverse("console:audit"), {"action": "model."}).content.decode()
    assert "model.set_default" in page and "root" in page
    assert (
        "model.set_default"
        not in staff_client.get(reverse("console:audit"), {"action": "user."}).content.decode()
    )


@pytest.mark.database
def test_history_restore_gets_the_whole_page(staff_client: Client, log_rows: None) -> None:
    headers = {"HX-Request": "true", "HX-History-Restore-Request": "true"}
    page = staff_client.get(reverse("console:requests"), {"user": "pat"}, headers=headers).content.decode()
    assert "<h1>Request log</h1>" in page and page.count("<tr class=") == 2


@pytest.mark.database
def test_jobs_page_lists_process_jobs(staff_client: Client, manager: ModelManager) -> None:
    staff_client.post(reverse("console:model-load", args=["base"]))
    get_runtime().jobs.wait_all()
    page = staff_client.get(reverse("console:jobs")).content.decode()
    assert "base loaded" in page and 'data-state="succeeded"' in page
    assert 'hx-trigger="every 1s"' not in page  # nothing running: no polling


@pytest.mark.parametrize(
    ("value", "text"), [(None, "—"), (512, "512 B"), (1536, "1.5 KiB"), (3 * 2**30, "3.0 GiB")]
)
def test_bytes_filter(value: int | None, text: str) -> None:
    assert console_filters.bytes(value) == text


def test_params_filter() -> None:
    assert console_filters.params(None) == "—"
    assert console_filters.params(134_515_008) == "134.5 M"
    assert console_filters.params(7_000_000_000) == "7.00 B"
    assert console_filters.params(4_000) == "4,000"
