"""docker/nginx.conf in a real nginx in front of a live server: streams unbuffered, /metrics kept private,
login attempts rate-limited, WebSocket upgrades passed, the scheme set by nginx."""

from __future__ import annotations

import base64
import json
import os
import socket
import time
from collections.abc import Iterator

import pytest

from tests.live_server import REPO_ROOT, LiveDaphne
from tests.webapp.nginx import Proxy, nginx_skip_reason, start_nginx

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def proxy(daphne_server: LiveDaphne, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    reason = nginx_skip_reason()
    if reason:
        pytest.skip(reason)
    proxy = start_nginx([f"{daphne_server.host}:{daphne_server.port}"], tmp_path_factory.mktemp("nginx"))
    yield proxy
    proxy.stop()


def test_sse_arrives_token_by_token_through_nginx(proxy: Proxy) -> None:
    body = {
        "messages": [{"role": "user", "content": "Count from one to twenty in words."}],
        "max_tokens": 48,
        "temperature": 0,
        "ignore_eos": True,  # streaming is the subject, not where this greedy answer happens to end
        "stream": True,
    }
    conn = proxy.connection()
    started = time.monotonic()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    arrivals = []
    for line in response:
        if line.startswith(b"data: {"):
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                arrivals.append(time.monotonic() - started)
    conn.close()
    assert len(arrivals) > 10
    # Buffered, every chunk would arrive at the end at once; streamed, they spread over the generation.
    assert arrivals[0] < arrivals[-1] * 0.5 and len({round(t, 2) for t in arrivals}) > len(arrivals) // 2


def test_metrics_stay_private_behind_nginx(proxy: Proxy, daphne_server: LiveDaphne) -> None:
    for path in ("/metrics", "/metrics/"):
        conn = proxy.connection()
        conn.request("GET", path)
        assert conn.getresponse().status == 404
        conn.close()
    assert daphne_server.get("/metrics")[0] == 200  # Prometheus scrapes the replica directly


def test_the_scheme_is_set_by_nginx_not_passed_through() -> None:
    # Passing the client's X-Forwarded-Proto through would let a plain-HTTP client claim https to Django
    # (SECURE_PROXY_SSL_HEADER in production).
    text = (REPO_ROOT / "docker" / "nginx.conf").read_text(encoding="utf-8")
    assert "proxy_set_header X-Forwarded-Proto $scheme;" in text and "$http_x_forwarded_proto" not in text


def test_login_attempts_are_rate_limited(proxy: Proxy) -> None:
    statuses = []
    for _ in range(12):
        conn = proxy.connection()
        conn.request("GET", "/login/")
        statuses.append(conn.getresponse().status)
        conn.close()
    # 10 a minute with a burst of 5: the first ones pass, the flood is refused by nginx itself.
    assert statuses[0] != 503 and statuses.count(503) >= 5


def test_websocket_upgrades_pass_through(proxy: Proxy) -> None:
    # An anonymous socket is refused by the app after the upgrade: reaching the app at all proves nginx
    # forwards the Upgrade handshake (without it the answer would be an HTTP error page from the app).
    key = base64.b64encode(os.urandom(16)).decode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(
            (
                "GET /ws/chat/1/ HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nOrigin: http://localhost\r\n\r\n"
            ).encode()
        )
        head = sock.recv(4096).decode("latin-1")
    assert head.startswith("HTTP/1.1 101") or head.startswith("HTTP/1.1 403"), head
