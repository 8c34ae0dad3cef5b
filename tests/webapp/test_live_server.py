"""The real thing: Daphne in a subprocess with the real default model, as `make run` serves it."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

pytestmark = pytest.mark.slow


def test_health_is_200_once_the_default_model_is_loaded(daphne_server: LiveDaphne) -> None:
    status, body = daphne_server.get("/health")
    assert status == 200
    health = json.loads(body)
    assert health["status"] == "ok"
    assert health["models"][0]["state"] == "loaded"


def test_metrics_show_the_loaded_engine(daphne_server: LiveDaphne) -> None:
    status, body = daphne_server.get("/metrics")
    assert status == 200
    text = body.decode()
    model = json.loads(daphne_server.get("/health")[1])["model"]
    assert f'mooncake:num_requests_running{{model_name="{model}"}}' in text
    assert f'mooncake:kv_cache_capacity_tokens{{model_name="{model}"}}' in text


def test_static_files_over_daphne(daphne_server: LiveDaphne) -> None:
    status, body = daphne_server.get("/static/vendor/htmx.min.js")
    assert status == 200
    assert body.startswith(b"var htmx=")


def _head(server: LiveDaphne, path: str) -> str:
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {server.host}\r\nConnection: close\r\n\r\n".encode())
        return sock.recv(4096).decode()


def test_first_run_setup_then_login(tmp_path: Path) -> None:
    # Its own fresh database: the shared server gains accounts as other suites use it.
    server = start_live_daphne(tmp_path / "fresh", autoload=False, startup_timeout=120)
    try:
        head = _head(server, "/chat/")
        assert head.startswith("HTTP/1.1 302")
        assert "Location: /setup/" in head
        assert server.get("/health")[0] == 503
        server.create_user("admin", "moon-cake-42!", staff=True)
        head = _head(server, "/chat/")
        assert "Location: /login/?next=/chat/" in head
        assert _head(server, "/setup/").startswith("HTTP/1.1 404")
    finally:
        stop_live_daphne(server)


def _handshake(server: LiveDaphne, origin: str, cookie: str = "") -> str:
    cookie_line = f"Cookie: {cookie}\r\n" if cookie else ""
    request = (
        f"GET /ws/ping/ HTTP/1.1\r\nHost: {server.host}:{server.port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {origin}\r\n{cookie_line}\r\n"
    )
    with socket.create_connection((server.host, server.port), timeout=10) as sock:
        sock.sendall(request.encode())
        return sock.recv(4096).decode(errors="replace")


def test_websocket_handshakes_are_refused_for_foreign_origin_and_anonymous(daphne_server: LiveDaphne) -> None:
    assert _handshake(daphne_server, "http://evil.example.com").startswith("HTTP/1.1 403")
    assert _handshake(daphne_server, daphne_server.url).startswith("HTTP/1.1 403")


def test_websocket_origin_must_match_port_and_scheme(daphne_server: LiveDaphne) -> None:
    # Logged in, so only the Origin decides (webapp.core.origins): another port or scheme of this host is
    # another site.
    daphne_server.create_user("origins", "origins-password-1")
    cookie = f"sessionid={daphne_server.login_session('origins')}"
    host, port = daphne_server.host, daphne_server.port
    assert _handshake(daphne_server, f"http://{host}:{port}", cookie).startswith("HTTP/1.1 101")
    for origin in (f"http://{host}:{port + 1}", f"https://{host}:{port}", f"http://localhost:{port}"):
        assert _handshake(daphne_server, origin, cookie).startswith("HTTP/1.1 403"), origin
