"""Every bad input is a 400 in OpenAI's error shape (never ninja's 422)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

USER = [{"role": "user", "content": "hi"}]


def assert_openai_error(response: Any, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == kind and error["message"]
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": USER, "temperature": 2.5}, "temperature"),
        ({"messages": USER, "temperature": -0.1}, "temperature"),
        ({"messages": USER, "top_p": 0}, "top_p"),
        ({"messages": USER, "top_p": 1.5}, "top_p"),
        ({"messages": USER, "presence_penalty": 3}, "presence_penalty"),
        ({"messages": USER, "frequency_penalty": -2.5}, "frequency_penalty"),
        ({"messages": USER, "n": 0}, "n"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "seed": 2**63}, "seed"),
        ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": USER, "top_logprobs": 3}, None),
        ({"messages": USER, "stream_options": {"include_usage": True}}, None),
        ({"messages": USER, "logit_bias": {"5": 101}}, "logit_bias"),
        ({"messages": USER, "logit_bias": {"abc": 1}}, "logit_bias"),
        ({"messages": USER, "stop": ""}, "stop"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, None),
        ({"messages": [{"role": "user"}]}, None),
        ({"messages": [{"role": "tool", "content": "x"}]}, None),
        ({"messages": USER, "response_format": {"type": "yaml"}}, None),
        ({"messages": USER, "response_format": {"type": "json_schema"}}, None),
        ({"messages": USER, "tool_choice": "required"}, None),
        ({}, "messages"),
    ],
)
async def test_chat_bad_fields_are_400(client: AsyncClient, body: dict[str, Any], param: str | None) -> None:
    error = assert_openai_error(
        await post_json(client, "/v1/chat/completions", body), 400, "invalid_request_error"
    )
    if param is not None:
        assert (error["param"] or "").startswith(param)


@pytest.mark.database
@pytest.mark.parametrize(
    "body",
    [
        {"prompt": ""},
        {"prompt": []},
        {"prompt": [[]]},
        {"prompt": "x", "echo": True, "logprobs": 21},
        {"prompt": "x", "stream_options": {"include_usage": True}},
        {"prompt": "x", "suffix": "y"},
        {"prompt": "x", "best_of": 3},
        {"prompt": {"a": 1}},
        {"prompt": [1, "a"]},
    ],
)
async def test_completion_bad_fields_are_400(client: AsyncClient, body: dict[str, Any]) -> None:
    assert_openai_error(await post_json(client, "/v1/completions", body), 400, "invalid_request_error")


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"text"', ""])
async def test_malformed_json_is_400(client: AsyncClient, raw: str) -> None:
    for url in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
        assert_openai_error(await post_json(client, url, raw), 400, "invalid_request_error")


@pytest.mark.database
async def test_prompt_longer_than_context_is_400(client: AsyncClient, engine: FakeEngine) -> None:
    engine.max_model_len = 8
    long = " ".join(f"w{i}" for i in range(20))
    error = assert_openai_error(
        await post_json(client, "/v1/completions", {"prompt": long}), 400, "invalid_request_error"
    )
    assert error["code"] == "context_length_exceeded"


@pytest.mark.database
async def test_prompt_plus_max_tokens_over_context_is_400(client: AsyncClient, engine: FakeEngine) -> None:
    engine.max_model_len = 16
    body = {"prompt": "a b c", "max_tokens": 14}
    error = assert_openai_error(
        await post_json(client, "/v1/completions", body), 400, "invalid_request_error"
    )
    assert error["param"] == "max_tokens"
    chat = {"messages": USER, "max_completion_tokens": 15}
    assert_openai_error(await post_json(client, "/v1/chat/completions", chat), 400, "invalid_request_error")


@pytest.mark.database
async def test_out_of_vocab_token_ids_are_400(client: AsyncClient) -> None:
    for prompt in ([10**6], [[1, 2], [-1]]):
        error = assert_openai_error(
            await post_json(client, "/v1/completions", {"prompt": prompt}), 400, "invalid_request_error"
        )
        assert "vocabulary" in error["message"]
    body = {"prompt": "a", "logit_bias": {"999999": 5}}
    assert_openai_error(await post_json(client, "/v1/completions", body), 400, "invalid_request_error")
    assert_openai_error(
        await post_json(client, "/detokenize", {"tokens": [999999]}), 400, "invalid_request_error"
    )


@pytest.mark.database
async def test_image_parts_are_400(client: AsyncClient) -> None:
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
    body = {"messages": messages}
    assert_openai_error(await post_json(client, "/v1/chat/completions", body), 400, "invalid_request_error")


@pytest.mark.database
async def test_unsupported_json_schema_is_400(client: AsyncClient) -> None:
    body = {
        "messages": USER,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}},
    }
    assert_openai_error(await post_json(client, "/v1/chat/completions", body), 400, "invalid_request_error")


@pytest.mark.database
async def test_unknown_fields_and_user_are_accepted(client: AsyncClient) -> None:
    body = {"messages": USER, "user": "someone", "some_future_field": 1, "max_tokens": 2}
    response = await post_json(client, "/v1/chat/completions", body)
    assert response.status_code == 200
