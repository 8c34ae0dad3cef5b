"""engine.type: openai end to end: a front Mooncake whose model runs on a second, real Mooncake (the
upstream, with API keys required and a smaller context), reached over its OpenAI API.

The last test stops the upstream: the tests run in file order and share the two servers.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inference import EngineConfig, SamplingParams
from inference.errors import UpstreamUnavailableError
from inference.frontends.remote.engine import RemoteEngine
from inference.frontends.remote.upstream import Upstream
from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

pytestmark = pytest.mark.slow

UPSTREAM_CONTEXT = 1024
FRONT_CONTEXT = 2048  # larger on purpose: the upstream, not the front, refuses what does not fit its own
MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveDaphne, str]]:
    """Its own server: keys required and a small context, which the front's refusals are checked against."""
    server = start_live_daphne(
        tmp_path_factory.mktemp("upstream"),
        api_auth="required",
        config={"model": {"max_model_len": UPSTREAM_CONTEXT}},
    )
    server.create_user("owner", "owner-password-1")
    secret = server.shell(
        "from django.contrib.auth.models import User\n"
        "from webapp.accounts.services import api_key_create\n"
        "print(api_key_create(user=User.objects.get(username='owner')).secret)\n"
    ).strip()
    yield server, secret
    stop_live_daphne(server)


@pytest.fixture(scope="module")
def front(upstream: tuple[LiveDaphne, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """Its own server: its one model is the upstream, served through engine type `openai`."""
    server, secret = upstream
    config = {
        "model": {"model_id": "default", "name": "remote-smol", "max_model_len": FRONT_CONTEXT},
        "engine": {"type": "openai", "base_url": f"{server.url}/v1", "api_key_env": "UPSTREAM_API_KEY"},
    }
    front = start_live_daphne(
        tmp_path_factory.mktemp("front"),
        config=config,
        env={"UPSTREAM_API_KEY": secret},
        startup_timeout=180,
    )
    yield front
    stop_live_daphne(front)


def _post(base: str, path: str, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{base}{path}", json=body, headers=headers, timeout=120)


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if line.startswith("data: ") and line != "data: [DONE]":
            yield json.loads(line[6:])


def _running(upstream: LiveDaphne) -> float:
    _, body = upstream.get("/metrics")
    found = re.findall(rb"^mooncake:num_requests_running\{[^}]*\} ([0-9.]+)$", body, re.M)
    return sum(float(value) for value in found)


def test_front_serves_the_upstream_model(front: LiveDaphne) -> None:
    status, body = front.get("/health")
    assert status == 200 and json.loads(body)["status"] == "ok"
    models = httpx.get(f"{front.url}/v1/models", timeout=30).json()["data"]
    assert [(m["id"], m["state"], m["max_model_len"]) for m in models] == [
        ("remote-smol", "loaded", FRONT_CONTEXT)
    ]


def test_greedy_chat_equals_the_upstream_answer(front: LiveDaphne, upstream: tuple[LiveDaphne, str]) -> None:
    server, key = upstream
    body = {"messages": MESSAGES, "max_tokens": 24, "temperature": 0}
    ours = _post(front.url, "/v1/chat/completions", body)
    theirs = _post(server.url, "/v1/chat/completions", body, key)
    assert ours.status_code == theirs.status_code == 200, ours.text
    mine, upstream_answer = ours.json(), theirs.json()
    assert mine["model"] == "remote-smol"
    assert mine["choices"][0]["message"]["content"] == upstream_answer["choices"][0]["message"]["content"]
    assert mine["choices"][0]["finish_reason"] == upstream_answer["choices"][0]["finish_reason"]
    # The same template and tokens went upstream; the upstream's own count is the one reported.
    assert mine["usage"] == upstream_answer["usage"]


def test_streaming_arrives_in_chunks(front: LiveDaphne) -> None:
    body = {"messages": MESSAGES, "max_tokens": 24, "temperature": 0, "stream": True}
    body["stream_options"] = {"include_usage": True}
    whole = _post(front.url, "/v1/chat/completions", {**body, "stream": False, "stream_options": None})
    with httpx.stream("POST", f"{front.url}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        events = list(_events(response.iter_lines()))
    pieces = [e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]]
    assert len([p for p in pieces if p]) >= 3
    assert "".join(pieces) == whole.json()["choices"][0]["message"]["content"]
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0


def test_completions_with_token_ids_and_n(front: LiveDaphne) -> None:
    response = _post(
        front.url, "/v1/completions", {"prompt": [1, 504, 3458], "max_tokens": 8, "n": 2, "seed": 3}
    )
    assert response.status_code == 200, response.text
    assert sorted(c["index"] for c in response.json()["choices"]) == [0, 1]


def test_a_client_that_disconnects_aborts_upstream(
    front: LiveDaphne, upstream: tuple[LiveDaphne, str]
) -> None:
    server, _ = upstream
    body = {"messages": MESSAGES, "max_tokens": 900, "ignore_eos": True, "stream": True}
    with (
        httpx.Client(timeout=120) as client,
        client.stream("POST", f"{front.url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        for _ in range(4):
            next(_events(lines))
        assert _running(server) >= 1
    # The connection is closed: the front closes its upstream stream, and the upstream aborts.
    deadline = time.monotonic() + 10
    while _running(server) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _running(server) == 0
    _, metrics = server.get("/metrics")
    assert re.search(rb'mooncake:request_success_total\{[^}]*finished_reason="abort"[^}]*\} [1-9]', metrics)


def test_upstream_rejection_passes_on_as_400(front: LiveDaphne) -> None:
    # Fits the front's context, not the upstream's: the upstream's words reach the client.
    response = _post(front.url, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1500})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert f"maximum context length is {UPSTREAM_CONTEXT}" in error["message"]


def test_grammar_features_are_refused_clearly(front: LiveDaphne) -> None:
    body = {"messages": MESSAGES, "max_tokens": 8, "response_format": {"type": "json_object"}}
    response = _post(front.url, "/v1/chat/completions", body)
    assert response.status_code == 400
    assert "engine type 'openai'" in response.json()["error"]["message"]


def test_remote_engine_in_process(upstream: tuple[LiveDaphne, str], tmp_path: Path) -> None:
    server, key = upstream
    with pytest.raises(UpstreamUnavailableError, match="401"):
        Upstream(f"{server.url}/v1", api_key="wrong", timeout=10).models(timeout=10)
    config = EngineConfig(
        engine_type="openai", base_url=f"{server.url}/v1", api_key=key, cache_dir=str(tmp_path)
    )
    engine = RemoteEngine.start(config)
    try:
        assert engine.health().state == "ready" and engine.max_model_len == UPSTREAM_CONTEXT
        ids = engine.apply_chat_template(MESSAGES)

        async def run() -> Any:
            last = None
            async for out in engine.generate(ids, SamplingParams(n=2, max_tokens=6, seed=1)):
                last = out
            return last

        last = asyncio.run(run())
        assert last.finished and [len(o.token_ids) for o in last.outputs] == [6, 6]
        stats = engine.stats()
        assert (stats.num_running, stats.requests_total, stats.generation_tokens_total) == (0, 1, 12)
    finally:
        engine.shutdown()


def _revoke_keys(upstream: LiveDaphne, revoked: bool) -> None:
    upstream.shell(
        "from django.utils import timezone\n"
        "from webapp.accounts.models import ApiKey\n"
        f"ApiKey.objects.update(revoked_at={'timezone.now()' if revoked else 'None'})\n"
    )


def _health(front: LiveDaphne) -> tuple[int, dict[str, Any]]:
    status, body = front.get("/health")
    return status, json.loads(body)


def test_a_refused_key_shows_as_upstream_authentication_failure(
    front: LiveDaphne, upstream: tuple[LiveDaphne, str]
) -> None:
    server, _ = upstream
    _revoke_keys(server, True)
    try:
        response = _post(front.url, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4})
        assert response.status_code == 503, response.text
        status, body = _health(front)  # the front's API auth is off: anyone may see its public model
        assert status == 503 and body["status"] == "dead"
        [model] = body["models"]
        assert model["state"] == "unavailable"
        refused = f"upstream authentication failed: {server.url}/v1 refused our API key"
        assert model["error"].startswith(refused)
        assert "engine.api_key_env" in model["error"] and "401" in model["error"]
        assert "refused our API key" in body["reason"]
        front.create_user("admin", "admin-password-1", staff=True)
        page = httpx.get(
            front.url + "/console/models/", headers={"Cookie": f"sessionid={front.login_session('admin')}"}
        )
        assert page.status_code == 200
        assert "data-trouble>unavailable<" in page.text
        assert f"{server.url}/v1 refused our API key" in page.text
    finally:
        _revoke_keys(server, False)
    # The health poll (every 5 s) finds the key accepted again, as after an outage.
    deadline = time.monotonic() + 20
    while _health(front)[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.5)
    status, body = _health(front)
    assert status == 200 and body["models"][0]["state"] == "loaded" and body["models"][0]["error"] is None


def test_upstream_down_is_503_with_retry_after(front: LiveDaphne, upstream: tuple[LiveDaphne, str]) -> None:
    server, _ = upstream
    stop_live_daphne(server)
    response = _post(front.url, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8})
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "upstream_unavailable"
    status, body = front.get("/health")
    assert status == 503 and json.loads(body)["status"] == "dead"
