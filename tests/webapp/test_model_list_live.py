"""A models list in mooncake.yaml, served for real: the bundled model twice (float32 and bfloat16) in one
Daphne, each answering by id through the API, and both in the console as "from mooncake.yaml"."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import LiveDaphne, start_live_daphne, stop_live_daphne

pytestmark = pytest.mark.slow

MODELS = {
    "models": [
        {"id": "smol-fp32", "model_id": "default", "dtype": "float32"},
        {"id": "smol-bf16", "model_id": "default", "dtype": "bfloat16", "default": True},
    ]
}
PROMPT = [{"role": "user", "content": "Name three colours."}]


def _post(server: LiveDaphne, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def _sse_data(server: LiveDaphne, body: dict[str, Any], timeout: float = 120) -> list[str]:
    """The data lines of a streamed chat completion, in order ("[DONE]" last)."""
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return [
            line.decode().removeprefix("data: ").strip() for line in response if line.startswith(b"data: ")
        ]


def _chat(server: LiveDaphne, model: str | None) -> tuple[str, str]:
    body: dict[str, Any] = {"messages": PROMPT, "temperature": 0, "max_tokens": 24}
    if model is not None:
        body["model"] = model
    reply = _post(server, "/v1/chat/completions", body)
    return str(reply["model"]), str(reply["choices"][0]["message"]["content"])


def _wait_all_loaded(server: LiveDaphne, names: set[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        models = json.loads(server.get("/health")[1]).get("models", [])
        states = {m["name"]: m["state"] for m in models}
        if all(states.get(name) == "loaded" for name in names):
            return
        assert not any(states.get(name) == "failed" for name in names), f"{models}\n{server.log_tail()}"
        time.sleep(0.5)
    raise AssertionError(f"not all loaded: {server.get('/health')[1]!r}\n{server.log_tail()}")


def _staff_session(server: LiveDaphne) -> str:
    server.create_user("admin", "moon-cake-42!", staff=True)
    code = (
        "from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY\n"
        "from django.contrib.auth.models import User\n"
        "from django.contrib.sessions.backends.db import SessionStore\n"
        "u = User.objects.get(username='admin')\n"
        "s = SessionStore()\n"
        "s[SESSION_KEY] = str(u.pk)\n"
        "s[BACKEND_SESSION_KEY] = 'django.contrib.auth.backends.ModelBackend'\n"
        "s[HASH_SESSION_KEY] = u.get_session_auth_hash()\n"
        "s.create()\n"
        "print(s.session_key)\n"
    )
    return server.manage("shell", "-v", "0", "-c", code).stdout.strip()


def test_a_models_list_serves_both_by_id_and_shows_both_in_the_console(tmp_path: Path) -> None:
    single = start_live_daphne(
        tmp_path / "single", config={"model": {"model_id": "default", "dtype": "float32"}}
    )
    try:
        _, fp32_alone = _chat(single, None)
    finally:
        stop_live_daphne(single)

    server = start_live_daphne(tmp_path / "list", config={"model": MODELS})
    try:
        _wait_all_loaded(server, {"smol-fp32", "smol-bf16"})
        listed = {m["id"] for m in json.loads(server.get("/v1/models")[1])["data"]}
        assert {"smol-fp32", "smol-bf16"} <= listed

        model, fp32 = _chat(server, "smol-fp32")
        assert model == "smol-fp32" and fp32 == fp32_alone  # greedy fp32: as the model served alone
        model, bf16 = _chat(server, "smol-bf16")
        assert model == "smol-bf16" and bf16
        assert _chat(server, None)[0] == "smol-bf16"  # no model: the one that says default: true

        session = _staff_session(server)
        request = urllib.request.Request(
            server.url + "/console/models/", headers={"Cookie": f"sessionid={session}"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            page = response.read().decode()
        for name in ("smol-fp32", "smol-bf16"):
            row = page[page.index(f'data-model="{name}"') :]
            row = row[: row.index("</tr>")]
            assert "from mooncake.yaml" in row, row
    finally:
        stop_live_daphne(server)
