"""The live dashboard across replicas: each live replica's row, their total, and the page's replicas table."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from webapp.accounts.models import RequestLog
from webapp.console import dashboard, fleet
from webapp.console.models import Replica
from webapp.console.replication import GONE_AFTER_S, model_sync


def sample(**figures: Any) -> dict[str, Any]:
    base = dashboard.Sample(
        t=time.time(), tokens_per_s=0.0, prompt_tokens_per_s=0.0, running=0, waiting=0, kv_usage=0.0,
        ttft_p50=None, ttft_p95=None, itl_p50=None, itl_p95=None, preemptions=0, aborts=0,
        client_errors=0, server_errors=0, rss_mb=0.0, cpu_percent=0.0, gpu_mem_mb=None, gpu_util=None,
    )  # fmt: skip
    return dataclasses.asdict(dataclasses.replace(base, **figures))


def replica(name: str, figures: dict[str, Any] | None, *, age_s: float = 1.0) -> Replica:
    now = timezone.now()
    return Replica.objects.create(
        name=name, started_at=now - dt.timedelta(minutes=5), seen_at=now - dt.timedelta(seconds=age_s),
        sample=figures,
    )  # fmt: skip


B = sample(tokens_per_s=10.5, prompt_tokens_per_s=100.0, running=3, waiting=1, kv_usage=0.25, ttft_p50=0.2,
           ttft_p95=0.9, itl_p50=0.02, itl_p95=0.05, preemptions=2, rss_mb=1000.0, cpu_percent=50.0,
           gpu_mem_mb=2048.0, gpu_util=30.0)  # fmt: skip
C = sample(tokens_per_s=4.0, prompt_tokens_per_s=40.0, running=4, waiting=5, kv_usage=0.75, ttft_p50=0.5,
           ttft_p95=0.6, itl_p50=0.01, itl_p95=0.08, preemptions=1, rss_mb=500.0, cpu_percent=25.0,
           gpu_mem_mb=1024.0, gpu_util=80.0)  # fmt: skip


def data(client: Client) -> dict[str, Any]:
    response = client.get(reverse("console:dashboard-data"))
    assert response.status_code == 200
    payload: dict[str, Any] = response.json()
    return payload


def by_name(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in payload["replicas"]}


def test_total_sums_rows_and_takes_the_worst_latency(staff_client: Client) -> None:
    this = model_sync().name
    replica("web-b", B)
    replica("web-c", C, age_s=3)
    replica("web-gone", sample(tokens_per_s=999.0, running=99, rss_mb=9999.0), age_s=GONE_AFTER_S + 5)
    replica("web-new", None)
    replica(this, sample(running=77, rss_mb=1.0))  # its own heartbeat: the live sample replaces it

    payload = data(staff_client)
    rows, total = by_name(payload), payload["total"]
    assert sorted(rows) == sorted([this, "web-b", "web-c", "web-new"])  # the stale one is left out
    mine = rows[this]
    assert mine["this"] and mine["sample"] == payload["samples"][-1] and mine["age_s"] < 1
    assert mine["sample"]["running"] == 0 and mine["sample"]["rss_mb"] > 10  # live, not the row's 77 / 1.0
    assert not rows["web-b"]["this"] and rows["web-b"]["sample"] == B and rows["web-c"]["sample"] == C
    assert 2.5 <= rows["web-c"]["age_s"] < 5 and dt.datetime.fromisoformat(rows["web-c"]["seen_at"])
    assert rows["web-new"]["sample"] is None  # listed, no figures

    own = mine["sample"]
    assert total["tokens_per_s"] == pytest.approx(own["tokens_per_s"] + 14.5)
    assert total["prompt_tokens_per_s"] == pytest.approx(own["prompt_tokens_per_s"] + 140.0)
    assert (total["running"], total["waiting"], total["preemptions"]) == (7, 6, 3)
    assert total["rss_mb"] == pytest.approx(own["rss_mb"] + 1500.0)
    assert total["cpu_percent"] == pytest.approx(own["cpu_percent"] + 75.0)
    assert total["gpu_mem_mb"] == pytest.approx((own["gpu_mem_mb"] or 0.0) + 3072.0)
    assert total["kv_usage"] == 0.75
    latencies = [total[key] for key in ("ttft_p50", "ttft_p95", "itl_p50", "itl_p95")]
    assert latencies == [0.5, 0.9, 0.02, 0.08]  # each the worst replica's
    assert total["gpu_util"] == max(80.0, own["gpu_util"] or 0.0)


def test_one_replica_total_is_its_sample(staff_client: Client) -> None:
    replica("web-gone", B, age_s=GONE_AFTER_S + 1)
    payload = data(staff_client)
    assert [row["this"] for row in payload["replicas"]] == [True]
    assert payload["total"] == payload["samples"][-1]


def test_no_gpu_anywhere_is_none() -> None:
    no_errors = {"client_errors": 0, "server_errors": 0}
    assert fleet.total([sample(), sample(rss_mb=3.0)], **no_errors)["gpu_mem_mb"] is None
    assert fleet.total([sample(), sample(gpu_mem_mb=5.0)], **no_errors)["gpu_mem_mb"] == 5.0


def test_api_errors_counted_once_however_many_replicas_report(staff_client: Client) -> None:
    data(staff_client)  # the first sample: the window starts here
    RequestLog.objects.create(endpoint="/v1/completions", status_code=503, duration_s=0.1)
    RequestLog.objects.create(endpoint="/v1/completions", status_code=200, duration_s=0.1)
    # The others saw the same shared request log; one of them also had two engine aborts.
    replica("web-b", sample(aborts=2, server_errors=1))
    replica("web-c", sample(aborts=0, server_errors=1))
    time.sleep(dashboard.MIN_INTERVAL)
    payload = data(staff_client)
    own = payload["samples"][-1]
    assert (own["aborts"], own["client_errors"], own["server_errors"]) == (0, 0, 1)  # this replica's chart
    assert len(payload["replicas"]) == 3
    total = payload["total"]
    assert (total["aborts"], total["client_errors"], total["server_errors"]) == (2, 0, 1)  # the 503 once


def test_a_callers_4xx_is_not_a_server_error(staff_client: Client) -> None:
    data(staff_client)
    for status in (400, 401, 404, 429, 500, 503):
        RequestLog.objects.create(endpoint="/v1/chat/completions", status_code=status, duration_s=0.1)
    RequestLog.objects.create(endpoint="/v1/chat/completions", status_code=200, duration_s=0.1)
    time.sleep(dashboard.MIN_INTERVAL)
    own = data(staff_client)["samples"][-1]
    assert (own["client_errors"], own["server_errors"]) == (4, 2)
    assert "errors" not in own and "api_errors" not in own  # no sum that mixes the two
    page = staff_client.get(reverse("console:dashboard")).content.decode()
    assert "server errors (5xx) and client errors (4xx)" in page


def test_page_lists_replicas_only_when_several(staff_client: Client) -> None:
    page = staff_client.get(reverse("console:dashboard")).content.decode()
    assert '<section id="replicas" hidden>' in page and 'id="stat-scope" hidden' in page
    assert "data-replica=" not in page

    replica("web-b", B)
    replica("web-starting", None)
    page = staff_client.get(reverse("console:dashboard")).content.decode()
    assert '<section id="replicas">' in page and 'id="stat-scope">' in page
    for name in (model_sync().name, "web-b", "web-starting"):
        assert f'<tr data-replica="{name}">' in page
    assert 'data-replicas="3"' in page and "(this one)" in page
