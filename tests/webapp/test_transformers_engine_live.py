"""Engine type "transformers" served for real, on the session's models-list server
(tests/webapp/live_models.py): the bundled model in fp32 on our engine and on transformers' continuous
batching. Greedy replies agree, streaming ends with [DONE], what its sampler lacks is a 400 naming the
parameter, and the console says which engine runs each."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from tests.live_server import LiveDaphne
from tests.webapp.live_models import console_models_page, console_row, sse_data
from tests.webapp.live_models import post as _post

pytestmark = pytest.mark.slow

NATIVE = "smol-fp32"  # our engine, fp32 as the transformers one
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def _reply(server: LiveDaphne, model: str) -> str:
    body = {"model": model, "messages": QUESTION, "temperature": 0, "max_tokens": 24}
    return str(_post(server, "/v1/chat/completions", body)["choices"][0]["message"]["content"])


def _stream(server: LiveDaphne, model: str) -> list[str]:
    body = {"model": model, "messages": QUESTION, "temperature": 0, "max_tokens": 24, "stream": True}
    return sse_data(server, body)


def _error(server: LiveDaphne, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    try:
        _post(server, "/v1/chat/completions", body)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    raise AssertionError("the request was accepted")


@pytest.fixture
def server(models_list_server: LiveDaphne) -> LiveDaphne:
    return models_list_server


def test_greedy_replies_agree_with_our_engine(server: LiveDaphne) -> None:
    ours = _reply(server, NATIVE)
    theirs = _reply(server, "smol-hf")
    assert theirs and theirs == ours


def test_streaming_carries_the_same_text_and_ends_with_done(server: LiveDaphne) -> None:
    events = _stream(server, "smol-hf")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == _reply(server, "smol-hf")
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_what_its_sampler_lacks_is_a_400_naming_it(server: LiveDaphne) -> None:
    status, body = _error(server, {"model": "smol-hf", "messages": QUESTION, "max_tokens": 4, "seed": 7})
    assert status == 400 and "seed" in body["error"]["message"]
    assert "transformers" in body["error"]["message"]
    status, body = _error(
        server,
        {
            "model": "smol-hf",
            "messages": QUESTION,
            "max_tokens": 4,
            "response_format": {"type": "json_object"},
        },
    )
    assert status == 400 and "response_format" in body["error"]["message"]
    # The same requests run on our engine.
    assert _post(
        server,
        "/v1/chat/completions",
        {"model": NATIVE, "messages": QUESTION, "max_tokens": 4, "seed": 7},
    )["choices"]


def test_the_console_says_which_engine_runs_it(server: LiveDaphne) -> None:
    row = console_row(console_models_page(server), "smol-hf")
    assert "LlamaForCausalLM (transformers)" in row, row


def test_models_list_and_health_show_both(server: LiveDaphne) -> None:
    listed = {m["id"] for m in json.loads(server.get("/v1/models")[1])["data"]}
    assert {NATIVE, "smol-hf"} <= listed
    health = json.loads(server.get("/health")[1])
    states = {m["name"]: m["state"] for m in health["models"]}
    assert states["smol-hf"] == "loaded"
