"""/metrics: open without MOONCAKE_METRICS_TOKEN, bearer-only with it; never on the public nginx site."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db


def test_open_without_a_token(client: Client, settings: Any) -> None:
    settings.MOONCAKE_METRICS_TOKEN = ""
    response = client.get("/metrics")
    assert response.status_code == 200 and b"python_info" in response.content


def test_token_required_when_set(client: Client, settings: Any) -> None:
    settings.MOONCAKE_METRICS_TOKEN = "s3cret-token"
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic s3cret-token"}):
        response = client.get("/metrics", headers=headers)
        assert response.status_code == 401 and b"python_info" not in response.content
        assert response["WWW-Authenticate"].startswith("Bearer")
    ok = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert ok.status_code == 200 and b"python_info" in ok.content


def test_public_nginx_site_refuses_metrics() -> None:
    conf = (Path(settings.BASE_DIR) / "docker" / "nginx.conf").read_text()
    assert re.search(r"location = /metrics \{\s*return 404;", conf)
    assert re.search(r"location \^~ /metrics/ \{\s*return 404;", conf)
    assert "proxy_set_header X-Request-ID $mooncake_request_id;" in conf
