"""/metrics: open without MOONCAKE_METRICS_TOKEN (less restricted models' series) except under production
settings, which refuse it; bearer-only with it; never on the public nginx site; reachable by each replica's
own IP (Prometheus scrapes each), while every other path keeps ALLOWED_HOSTS."""

from __future__ import annotations

import http.client
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.live_server import free_port
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import restrictions_changed
from webapp.serving.runtime import get_runtime

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


def test_production_settings_require_the_token(client: Client, settings: Any) -> None:
    settings.MOONCAKE_METRICS_TOKEN, settings.MOONCAKE_METRICS_TOKEN_REQUIRED = "", True
    response = client.get("/metrics")
    assert response.status_code == 403 and b"python_info" not in response.content
    assert b"MOONCAKE_METRICS_TOKEN" in response.content
    settings.MOONCAKE_METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200


def test_the_production_settings_module_requires_it(tmp_path: Path) -> None:
    """What the Docker image runs (webapp.settings.production), not a test's override, refuses /metrics."""
    script = (
        "import django; django.setup()\n"
        "from django.test import RequestFactory\n"
        "from webapp.serving.metrics_view import metrics\n"
        "print(metrics(RequestFactory().get('/metrics')).status_code)\n"
    )
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    env = {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "webapp.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "web",
        "MOONCAKE_DATA": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=settings.BASE_DIR, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "403"


@pytest.fixture
def open_and_secret() -> Iterator[None]:
    """Two loaded models; `secret` is restricted (to no group: admins only)."""
    manager = FakeModelManager.with_engine(FakeEngine(model_name="open"))
    manager.register("secret", None)
    manager.attach("secret", FakeEngine(model_name="secret"))
    get_runtime().install_manager(manager)
    ModelRegistration.objects.create(name="secret", source="default", restricted=True)
    restrictions_changed()
    yield
    get_runtime().install_manager(None)
    restrictions_changed()


def test_open_metrics_leave_out_restricted_models(
    client: Client, settings: Any, open_and_secret: None
) -> None:
    settings.MOONCAKE_METRICS_TOKEN = ""
    text = client.get("/metrics").content.decode()
    assert 'mooncake:num_requests_running{model_name="open"}' in text
    assert 'mooncake_tokens_generated_per_second{model="open"}' in text
    assert "secret" not in text
    # The families themselves stay, so dashboards and the exposition format are unchanged.
    assert "# TYPE mooncake:model_state gauge" in text and "python_info" in text


def test_the_token_holder_sees_every_model(client: Client, settings: Any, open_and_secret: None) -> None:
    settings.MOONCAKE_METRICS_TOKEN = "s3cret-token"
    text = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"}).content.decode()
    assert 'mooncake:num_requests_running{model_name="secret"}' in text
    assert 'mooncake:model_state{model_name="secret",state="loaded"} 1.0' in text


def test_public_nginx_site_refuses_metrics() -> None:
    conf = (Path(settings.BASE_DIR) / "docker" / "nginx.conf").read_text()
    assert re.search(r"location = /metrics \{\s*return 404;", conf)
    assert re.search(r"location \^~ /metrics/ \{\s*return 404;", conf)
    assert "proxy_set_header X-Request-ID $mooncake_request_id;" in conf


# Prometheus scrapes each replica by its IP (docker/prometheus.yml), which no ALLOWED_HOSTS lists: /metrics
# takes a Host that is the connection's own address; nothing else does.
REPLICA = {"SERVER_NAME": "172.18.0.5", "SERVER_PORT": "8000"}


@pytest.mark.parametrize("host", ["172.18.0.5:8000", "172.18.0.5"])
def test_metrics_by_the_replicas_own_ip(client: Client, settings: Any, host: str) -> None:
    settings.MOONCAKE_METRICS_TOKEN = ""
    assert "172.18.0.5" not in settings.ALLOWED_HOSTS
    response = client.get("/metrics", HTTP_HOST=host, **REPLICA)
    assert response.status_code == 200 and b"python_info" in response.content


def test_ipv6_replica(client: Client, settings: Any) -> None:
    settings.MOONCAKE_METRICS_TOKEN = ""
    response = client.get("/metrics", HTTP_HOST="[fd00::5]:8000", SERVER_NAME="fd00::5", SERVER_PORT="8000")
    assert response.status_code == 200


def test_metrics_by_ip_still_needs_the_token(client: Client, settings: Any) -> None:
    settings.MOONCAKE_METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics", HTTP_HOST="172.18.0.5:8000", **REPLICA).status_code == 401
    ok = client.get(
        "/metrics", HTTP_HOST="172.18.0.5:8000", headers={"Authorization": "Bearer s3cret-token"}, **REPLICA
    )
    assert ok.status_code == 200


@pytest.mark.parametrize("path", ["/health", "/version", "/login/", "/metrics/", "/metricsx", "/v1/models"])
def test_other_paths_with_that_host_are_refused(client: Client, path: str) -> None:
    assert client.get(path, HTTP_HOST="172.18.0.5:8000", **REPLICA).status_code == 400


@pytest.mark.parametrize(
    "host",
    [
        "10.9.9.9:8000",  # another address than the one the connection reached
        "172.18.0.5:9999",  # another port
        "evil.example.com",
        "172.18.0.5.evil.example.com",
        "0.0.0.0:8000",
    ],
)
def test_metrics_with_any_other_host_is_refused(client: Client, host: str) -> None:
    assert client.get("/metrics", HTTP_HOST=host, **REPLICA).status_code == 400


def test_a_real_server_answers_metrics_by_its_own_ip(tmp_path: Path) -> None:
    """Daphne fills SERVER_NAME from the accepted socket: production settings allow only `web`, yet a
    scrape addressed to the socket's IP gets the metrics; the same Host anywhere else is a 400."""
    port = free_port()
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    env = {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "webapp.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "web",
        "SECURE_SSL_REDIRECT": "0",
        "MOONCAKE_DATA": str(tmp_path),
        "MOONCAKE_AUTOLOAD": "0",
        "MOONCAKE_METRICS_TOKEN": "s3cret-token",  # production settings refuse /metrics without one
        "PYTHONUNBUFFERED": "1",
    }
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "webapp.serving.server", "--host", "127.0.0.1", "--port", str(port)],
            env=env, cwd=settings.BASE_DIR, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        own = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while (status := _get(port, "/version", "web")[0]) != 200:
            assert process.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.3)
        assert _get(port, "/metrics", own, token=None)[0] == 401
        status, body = _get(port, "/metrics", own)
        assert status == 200 and b"python_info" in body
        assert _get(port, "/version", own)[0] == 400
        assert _get(port, "/metrics", f"127.0.0.2:{port}")[0] == 400
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _get(port: int, path: str, host: str, token: str | None = "s3cret-token") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Host": host} | ({"Authorization": f"Bearer {token}"} if token else {})
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    except OSError:
        return 0, b""
    finally:
        connection.close()
