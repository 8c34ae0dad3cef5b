"""Response shapes of every endpoint against the fake engine."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json, sse_events
from tests.webapp.api.test_validation import USER
from tests.webapp.fake_engine import FakeEngine, FakeModelManager

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "Hello there, this is the fake model speaking."


def last_prompt(engine: FakeEngine) -> str:
    prompt = engine.calls[-1][0]
    return prompt if isinstance(prompt, str) else engine.tokenizer.decode(prompt)


@pytest.mark.database
async def test_chat_completion_shape(client: AsyncClient, engine: FakeEngine) -> None:
    body = {
        "messages": USER,
        "n": 3,
        "seed": 7,
        "stop": ["fake"],
        "top_k": 5,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "logit_bias": {"1": -5},
        "max_completion_tokens": 50,
        "max_tokens": 2,
    }
    data = (await post_json(client, "/v1/chat/completions", body)).json()
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-")
    assert [c["index"] for c in data["choices"]] == [0, 1, 2]
    for choice in data["choices"]:
        assert choice["message"] == {"role": "assistant", "content": "Hello there, this is the "}
        assert choice["finish_reason"] == "stop"
    params = engine.calls[-1][1]
    assert params.max_tokens == 50  # max_completion_tokens wins
    assert (params.n, params.seed, params.top_k, params.min_p, params.stop) == (3, 7, 5, 0.1, ["fake"])
    assert params.logit_bias == {1: -5.0}
    assert data["usage"]["completion_tokens"] == 3 * 5
    assert data["usage"]["total_tokens"] == data["usage"]["prompt_tokens"] + 15


@pytest.mark.database
async def test_chat_default_max_tokens_is_rest_of_context(client: AsyncClient, engine: FakeEngine) -> None:
    await post_json(client, "/v1/chat/completions", {"messages": USER})
    prompt, params, _ = engine.calls[-1]
    assert params.max_tokens == engine.max_model_len - len(prompt)


@pytest.mark.database
async def test_length_finish(client: AsyncClient) -> None:
    data = (await post_json(client, "/v1/completions", {"prompt": "a", "max_tokens": 2})).json()
    assert data["choices"][0] == {
        "index": 0,
        "text": "Hello there, ",
        "logprobs": None,
        "finish_reason": "length",
    }
    assert data["object"] == "text_completion"


@pytest.mark.database
async def test_completion_default_max_tokens_is_16(client: AsyncClient, engine: FakeEngine) -> None:
    await post_json(client, "/v1/completions", {"prompt": "a"})
    assert engine.calls[-1][1].max_tokens == 16


@pytest.mark.database
async def test_completion_prompt_forms_and_echo(client: AsyncClient, engine: FakeEngine) -> None:
    ids = engine.tokenizer.encode("one two")
    for prompt, n_prompts in (("one two", 1), (["one", "two"], 2), (ids, 1), ([ids, ids], 2)):
        body = {"prompt": prompt, "n": 2, "echo": True, "max_tokens": 1}
        data = (await post_json(client, "/v1/completions", body)).json()
        assert [c["index"] for c in data["choices"]] == list(range(2 * n_prompts))
        assert all(c["text"].endswith("Hello ") for c in data["choices"])
    assert data["choices"][0]["text"] == "one twoHello "  # echo + completion, verbatim


@pytest.mark.database
async def test_chat_streaming_framing(client: AsyncClient) -> None:
    body = {"messages": USER, "stream": True, "n": 2, "stream_options": {"include_usage": True}}
    response = await post_json(client, "/v1/chat/completions", body)
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    events = await sse_events(response)
    ids = {e["id"] for e in events}
    assert len(ids) == 1
    for index in (0, 1):
        mine = [e["choices"][0] for e in events if e["choices"] and e["choices"][0]["index"] == index]
        assert mine[0]["delta"] == {"role": "assistant", "content": ""}
        assert "".join(c["delta"].get("content") or "" for c in mine) == SCRIPT
        assert [c["finish_reason"] for c in mine if c["finish_reason"]] == ["stop"]
    assert all(e["usage"] is None for e in events[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 16


@pytest.mark.database
async def test_completion_streaming_without_usage(client: AsyncClient) -> None:
    response = await post_json(client, "/v1/completions", {"prompt": "a", "stream": True, "max_tokens": 3})
    events = await sse_events(response)
    assert "".join(e["choices"][0]["text"] for e in events) == "Hello there, this "
    assert events[-1]["choices"][0]["finish_reason"] == "length"
    assert all("usage" not in e for e in events)


async def test_models_list(client: AsyncClient) -> None:
    data = (await client.get("/v1/models")).json()
    assert data["object"] == "list"
    assert data["data"][0]["id"] == "fake-model" and data["data"][0]["owned_by"] == "mooncake"
    assert data["data"][0]["load"] is None


async def test_a_loading_model_shows_its_step_in_the_list_and_in_health(
    client: AsyncClient, manager: FakeModelManager
) -> None:
    manager.set_state("fake-model", "loading")
    info = manager.list()[0]
    info.load_phase, info.load_done, info.load_total = "loading weights", 12, 30
    card = (await client.get("/v1/models/fake-model")).json()
    assert card["state"] == "loading"
    assert card["load"] == {"step": "loading weights", "done": 12, "total": 30}
    health = json.loads((await client.get("/health")).content)
    assert [m.get("load") for m in health["models"]] == [{"step": "loading weights", "done": 12, "total": 30}]


async def test_tokenize_and_detokenize(client: AsyncClient) -> None:
    data = (await post_json(client, "/tokenize", {"prompt": "one two three"})).json()
    assert data["count"] == 3 and data["max_model_len"] == 2048
    text = (await post_json(client, "/detokenize", {"tokens": data["tokens"]})).json()
    assert text == {"prompt": "one two three"}
    chat = (await post_json(client, "/tokenize", {"messages": USER})).json()
    assert chat["count"] > 1
    both = await post_json(client, "/tokenize", {"prompt": "x", "messages": USER})
    assert both.status_code == 400


@pytest.mark.database
async def test_tools_auto_parses_tool_call_markup(client: AsyncClient, engine: FakeEngine) -> None:
    engine.script = 'Sure. <tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call>'
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    data = (await post_json(client, "/v1/chat/completions", {"messages": USER, "tools": tools})).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    call = choice["message"]["tool_calls"][0]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert call["id"].startswith("call_") and choice["message"]["content"] == "Sure."
    prompt = last_prompt(engine)
    assert "<|tools|>" in prompt  # the fake's template renders tools itself


@pytest.mark.database
async def test_assistant_tool_calls_and_tool_results_render(client: AsyncClient, engine: FakeEngine) -> None:
    messages = [
        *USER,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
    ]  # fmt: skip
    response = await post_json(client, "/v1/chat/completions", {"messages": messages})
    assert response.status_code == 200
    prompt = last_prompt(engine)
    assert "<tool_call>" in prompt and "<|tool|> 42" in prompt


async def test_docs_page_has_no_cdn(client: AsyncClient) -> None:
    page = (await client.get("/v1/docs")).content.decode()
    assert "cdn" not in page.lower() and "http" not in page
    assert (await client.get("/v1/docs/assets/swagger-ui-bundle.js")).status_code == 200
    assert (await client.get("/v1/docs/assets/secret.py")).status_code == 404
    schema = (await client.get("/v1/openapi.json")).json()
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize", "/detokenize"} <= set(
        schema["paths"]
    )
