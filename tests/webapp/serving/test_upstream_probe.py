"""`mooncake check` probes an `openai` engine's upstream: reachable, our key accepted, the model listed.

The upstream is a real HTTP server on a thread, answering GET /v1/models as an OpenAI server does: 200 with
a model list for the right key, 401 otherwise.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import free_port
from webapp.core.config import resolve_settings
from webapp.serving.config_report import config_report

pytestmark = pytest.mark.database

KEY = "sk-right"


class _Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/v1/models":
            self._answer(404, {"error": {"message": "not found"}})
        elif self.headers.get("Authorization") != f"Bearer {KEY}":
            self._answer(401, {"error": {"message": "Invalid API key"}})
        else:
            self._answer(200, {"object": "list", "data": [{"id": "served-model", "object": "model"}]})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _check(settings: Any, tmp_path: Path, engine: str, **env: str) -> tuple[list[str], list[str]]:
    (tmp_path / "mooncake.yaml").write_text(f"model: {{name: remote}}\nengine: {engine}\n")
    environ = {"MOONCAKE_DATA": str(tmp_path / "data"), **env}
    resolved = resolve_settings(environ, base_dir=tmp_path, cwd=tmp_path)
    settings.MOONCAKE_SETTINGS, settings.MOONCAKE = resolved, resolved.yaml
    report = config_report()
    upstream_problems = [p for p in report.problems if p.startswith("upstream of remote:")]
    return [line for line in report.lines if line.split()[:1] == ["upstream"]], upstream_problems


def test_a_working_upstream_is_no_problem(db: None, settings: Any, tmp_path: Path, upstream: str) -> None:
    engine = f"{{type: openai, base_url: '{upstream}', api_key_env: UP_KEY, upstream_model: served-model}}"
    lines, problems = _check(settings, tmp_path, engine, UP_KEY=KEY)
    assert problems == []
    # mooncake.yaml's model shows once; the same upstream is probed once.
    assert lines and all("key accepted, serves served-model" in line for line in lines)


def test_a_refused_key_names_the_setting(db: None, settings: Any, tmp_path: Path, upstream: str) -> None:
    engine = f"{{type: openai, base_url: '{upstream}', api_key_env: UP_KEY}}"
    _, problems = _check(settings, tmp_path, engine, UP_KEY="sk-wrong")
    assert len(problems) == 1
    assert f"GET {upstream}/models answered 401" in problems[0]
    assert "refused our API key" in problems[0] and "engine.api_key_env" in problems[0]


def test_no_key_for_an_upstream_wanting_one(db: None, settings: Any, tmp_path: Path, upstream: str) -> None:
    _, problems = _check(settings, tmp_path, f"{{type: openai, base_url: '{upstream}'}}")
    assert len(problems) == 1 and "wants an API key and none is set" in problems[0]


def test_a_model_the_upstream_does_not_list(db: None, settings: Any, tmp_path: Path, upstream: str) -> None:
    engine = f"{{type: openai, base_url: '{upstream}', api_key_env: UP_KEY, upstream_model: other}}"
    _, problems = _check(settings, tmp_path, engine, UP_KEY=KEY)
    assert len(problems) == 1
    assert "does not list engine.upstream_model 'other' (it lists: served-model)" in problems[0]


def test_an_unreachable_upstream_names_base_url(db: None, settings: Any, tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    _, problems = _check(settings, tmp_path, f"{{type: openai, base_url: '{url}'}}")
    assert len(problems) == 1
    assert f"GET {url}/models failed" in problems[0] and "engine.base_url" in problems[0]


def test_a_silent_upstream_does_not_hang_check(db: None, settings: Any, tmp_path: Path) -> None:
    """A server that accepts the connection and never answers: the probe's timeout ends it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        _, problems = _check(settings, tmp_path, f"{{type: openai, base_url: '{url}'}}")
    assert len(problems) == 1 and "had no answer within" in problems[0]
