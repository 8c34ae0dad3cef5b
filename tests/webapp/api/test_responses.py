"""/v1/responses against the fake engine: translation into the chat job, the Response object, refusals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_input_limits import byte_tokenizer
from tests.webapp.api.test_validation import assert_openai_error
from tests.webapp.fake_engine import FakeEngine
from webapp.api.services.grammar import GrammarLogitsProcessor

__all__ = ["byte_tokenizer"]  # autouse: grammars compile against a byte vocabulary

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.database]

SCRIPT = "Hello there, this is the fake model speaking."
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def last_prompt(engine: FakeEngine) -> str:
    prompt = engine.calls[-1][0]
    return prompt if isinstance(prompt, str) else engine.tokenizer.decode(prompt)


async def create(client: AsyncClient, **body: Any) -> Any:
    return await post_json(client, "/v1/responses", body)


async def test_string_input_gives_a_message_and_usage(client: AsyncClient, engine: FakeEngine) -> None:
    response = await create(client, input="hi", instructions="Be brief.", max_output_tokens=50, seed=3)
    assert response.status_code == 200
    data = response.json()
    assert data["object"] == "response" and data["id"].startswith("resp_")
    assert data["status"] == "completed" and data["model"] == "fake-model"
    assert data["incomplete_details"] is None and data["error"] is None
    [message] = data["output"]
    assert (
        message["type"] == "message" and message["role"] == "assistant" and message["status"] == "completed"
    )
    assert message["content"] == [{"type": "output_text", "text": SCRIPT, "annotations": []}]
    usage = data["usage"]
    assert usage["output_tokens"] == 8 and usage["input_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] == 0
    assert usage["output_tokens_details"] == {"reasoning_tokens": 0}
    assert last_prompt(engine) == "<|system|> Be brief.\n<|user|> hi\n<|assistant|> "
    params = engine.calls[-1][1]
    assert (params.max_tokens, params.seed) == (50, 3)
    assert data["instructions"] == "Be brief." and data["max_output_tokens"] == 50


async def test_item_list_input_becomes_chat_messages(client: AsyncClient, engine: FakeEngine) -> None:
    items = [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather in Paris?"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
        {"role": "user", "content": "thanks"},
    ]
    assert (await create(client, input=items, tools=[TOOL])).status_code == 200
    assert last_prompt(engine) == (
        "<|system|> Rules.\n<|user|> weather in Paris?\n"
        '<|assistant|> <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        "<|tool|> sunny\n<|assistant|> It is sunny.\n<|user|> thanks\n<|tools|> 1\n<|assistant|> "
    )


async def test_sampling_fields_reach_the_engine(client: AsyncClient, engine: FakeEngine) -> None:
    await create(client, input="hi", temperature=0.5, top_p=0.9, stop=["fake"])
    params = engine.calls[-1][1]
    assert (params.temperature, params.top_p, params.stop) == (0.5, 0.9, ["fake"])


async def test_max_output_tokens_makes_it_incomplete(client: AsyncClient) -> None:
    data = (await create(client, input="hi", max_output_tokens=2)).json()
    assert data["status"] == "incomplete"
    assert data["incomplete_details"] == {"reason": "max_output_tokens"}
    assert data["output"][0]["status"] == "incomplete"
    assert data["output"][0]["content"][0]["text"] == "Hello there, "


async def test_named_tool_choice_gives_a_function_call(client: AsyncClient) -> None:
    choice = {"type": "function", "name": "get_weather"}
    data = (await create(client, input="weather?", tools=[TOOL], tool_choice=choice)).json()
    [call] = data["output"]
    assert call["type"] == "function_call" and call["name"] == "get_weather"
    assert call["call_id"].startswith("call_") and call["id"].startswith("fc_")
    assert call["arguments"] == SCRIPT  # the fake engine ignores the grammar; the text is the arguments
    assert data["status"] == "completed" and data["tool_choice"] == choice
    assert data["tools"] == [TOOL]


async def test_json_schema_format_is_a_grammar(client: AsyncClient, engine: FakeEngine) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "name": "out", "schema": schema, "strict": True}
    data = (await create(client, input="hi", text={"format": fmt})).json()
    assert data["text"] == {"format": fmt}
    assert any(isinstance(p, GrammarLogitsProcessor) for p in engine.calls[-1][1].logits_processors)
    await create(client, input="hi", text={"format": {"type": "json_object"}})
    assert any(isinstance(p, GrammarLogitsProcessor) for p in engine.calls[-1][1].logits_processors)
    await create(client, input="hi", text={"format": {"type": "text"}})
    assert not engine.calls[-1][1].logits_processors


async def test_required_tool_call_is_parsed(client: AsyncClient, engine: FakeEngine) -> None:
    engine.script = json.dumps({"name": "get_weather", "arguments": {"city": "Oslo"}})
    data = (await create(client, input="weather?", tools=[TOOL], tool_choice="required")).json()
    [call] = data["output"]
    assert call["type"] == "function_call" and json.loads(call["arguments"]) == {"city": "Oslo"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tools": [{"type": "web_search_preview"}]}, "tools"),
        ({"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]}, "tools"),
        ({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}, "tools"),
        ({"tools": [{"type": "computer_use_preview"}]}, "tools"),
        ({"tools": [{"type": "mcp", "server_label": "x"}]}, "tools"),
        ({"tools": [{"type": "image_generation"}]}, "tools"),
        ({"tools": [{"type": "local_shell"}]}, "tools"),
        ({"tools": [{"type": "web_search"}]}, "tools"),
        ({"reasoning": {"effort": "high"}}, "reasoning"),
        ({"reasoning": {"summary": "auto"}}, "reasoning"),
        ({"include": ["file_search_call.results"]}, "include"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"truncation": "auto"}, "truncation"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"background": True, "store": False}, "background"),
        ({"background": True, "stream": True}, "stream"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [TOOL], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
        ({"tools": [TOOL], "tool_choice": {"type": "web_search_preview"}}, "tool_choice"),
        ({"tools": [dict(TOOL, name="bad name!")]}, "tools.0.name"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"temperature": 3}, "temperature"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.json_schema.schema"),
        ({"text": {"format": {"type": "xml"}}}, "text.format"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input"),
        ({"input": None}, "input"),
        ({"previous_response_id": "resp_missing"}, "previous_response_id"),
    ],
)
async def test_refused_fields_name_their_param(client: AsyncClient, body: dict[str, Any], param: str) -> None:
    response = await create(client, **{"input": "hi", **body})
    status = 404 if param == "previous_response_id" else 400
    error = assert_openai_error(
        response, status, "not_found_error" if status == 404 else "invalid_request_error"
    )
    assert error["param"] == param, error


async def test_accepted_null_options(client: AsyncClient) -> None:
    body: dict[str, Any] = {
        "input": "hi",
        "reasoning": None,
        "include": [],
        "truncation": "disabled",
        "service_tier": "auto",
    }
    assert (await create(client, **body)).status_code == 200
    assert (await create(client, input="hi", reasoning={"effort": None, "summary": None})).status_code == 200


async def test_routes_are_in_the_schema_and_json_only(client: AsyncClient) -> None:
    paths = (await client.get("/v1/openapi.json")).json()["paths"]
    assert {"413", "415", "400"} <= set(paths["/v1/responses"]["post"]["responses"])
    assert set(paths["/v1/responses/{response_id}"]) == {"get", "delete"}
    assert "post" in paths["/v1/responses/{response_id}/cancel"]
    assert "get" in paths["/v1/responses/{response_id}/input_items"]
    form = await client.post("/v1/responses", {"input": "hi"})  # multipart: a browser's cross-site form
    assert_openai_error(form, 415, "invalid_request_error")
    put = await client.put("/v1/responses", "{}", content_type="application/json")
    assert_openai_error(put, 405, "invalid_request_error")
