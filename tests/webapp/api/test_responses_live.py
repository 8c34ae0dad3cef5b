"""/v1/responses end to end: the real engine and bundled model on a live Daphne, through the official
client's responses.create, .stream, .retrieve, .delete and .input_items."""

from __future__ import annotations

import json
from typing import Any

import jsonschema_rs
import openai
import pytest
from openai import OpenAI

from tests.live_server import LiveDaphne
from tests.webapp.api.live import MODEL, create_key

pytestmark = pytest.mark.slow

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "unit": {"enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}


def test_create_retrieve_input_items_delete(oai: Any) -> None:
    response = oai.responses.create(
        model=MODEL,
        input="Name three colors.",
        instructions="Answer briefly.",
        max_output_tokens=8,
        temperature=0,
    )
    assert response.object == "response" and response.model == MODEL
    assert response.status in ("completed", "incomplete") and response.output_text
    assert response.usage.output_tokens <= 8 and response.usage.total_tokens == (
        response.usage.input_tokens + response.usage.output_tokens
    )
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens"
    again = oai.responses.retrieve(response.id)
    assert again.id == response.id and again.output_text == response.output_text
    items = oai.responses.input_items.list(response.id)
    assert [item.role for item in items.data] == ["user"] and items.data[0].content[
        0
    ].text == "Name three colors."
    oai.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(response.id)


def test_stream_events_in_order(oai: Any) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": "Say hello.",
        "max_output_tokens": 30,
        "temperature": 0,
    }
    with oai.responses.stream(**kwargs) as stream:
        events = list(stream)
        kinds = [event.type for event in events]
        final = events[-1].response
        if kinds[-1] == "response.completed":  # the client's accumulated response, when it ended normally
            assert stream.get_final_response().output_text == final.output_text
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    whole = oai.responses.create(**kwargs)
    assert final.output_text == whole.output_text and final.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens
    assert oai.responses.retrieve(final.id).output_text == final.output_text


def test_previous_response_id_keeps_the_conversation(oai: Any) -> None:
    first = oai.responses.create(
        model=MODEL, input="My name is Zorblat. Remember it.", max_output_tokens=20, temperature=0
    )
    second = oai.responses.create(
        model=MODEL,
        input="What is my name? Answer with the name only.",
        previous_response_id=first.id,
        max_output_tokens=10,
        temperature=0,
    )
    assert second.previous_response_id == first.id
    # The 135M model copies the rare name from the earlier turn (not always every letter).
    assert "zorbl" in second.output_text.lower(), second.output_text
    alone = oai.responses.create(
        model=MODEL, input="What is my name? Answer with the name only.", max_output_tokens=10, temperature=0
    )
    assert "zorbl" not in alone.output_text.lower()
    assert second.usage.input_tokens > alone.usage.input_tokens + first.usage.output_tokens


def test_function_call_round_trip(oai: Any) -> None:
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = oai.responses.create(
        model=MODEL,
        input=question,
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
        max_output_tokens=30,
        temperature=0,
    )
    [call] = [item for item in called.output if item.type == "function_call"]
    assert call.name == "get_weather" and call.call_id
    assert jsonschema_rs.validator_for(WEATHER["parameters"]).is_valid(json.loads(call.arguments))
    answer = oai.responses.create(
        model=MODEL,
        previous_response_id=called.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 21}'}],
        tools=[WEATHER],
        max_output_tokens=30,
        temperature=0,
    )
    assert answer.output[0].type == "message" and answer.output_text.strip()
    # The same round trip without storage: the client sends the call back itself.
    stateless = oai.responses.create(
        model=MODEL,
        input=[
            *question,
            {
                "type": "function_call",
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments,
            },
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"temperature_c": 21}'},
        ],
        tools=[WEATHER],
        store=False,
        max_output_tokens=30,
        temperature=0,
    )
    assert stateless.output_text == answer.output_text


def test_required_tool_choice_streams_a_call(oai: Any) -> None:
    with oai.responses.stream(
        model=MODEL,
        input="Weather in Oslo?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=40,
        temperature=0,
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds and kinds[-1] == "response.completed"
    [call] = final.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert jsonschema_rs.validator_for(WEATHER["parameters"]).is_valid(json.loads(call.arguments))


def test_json_schema_answer_validates(oai: Any) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    response = oai.responses.create(
        model=MODEL,
        input="Describe a person as JSON.",
        text={"format": {"type": "json_schema", "name": "person", "schema": schema, "strict": True}},
        max_output_tokens=30,
        temperature=0,
    )
    assert response.status == "completed", response
    assert jsonschema_rs.validator_for(schema).is_valid(json.loads(response.output_text))


def test_refusals_and_another_users_response(oai: Any, api_server: LiveDaphne) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        oai.responses.create(model=MODEL, input="hi", tools=[{"type": "web_search_preview"}])
    assert refused.value.body["param"] == "tools"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as reasoning:
        oai.responses.create(model=MODEL, input="hi", reasoning={"effort": "high"})
    assert reasoning.value.body["param"] == "reasoning"  # type: ignore[index]
    mine = oai.responses.create(model=MODEL, input="hi", max_output_tokens=2)
    other = OpenAI(
        base_url=api_server.url + "/v1", api_key=create_key(api_server, "someone-else"), max_retries=0
    )
    with pytest.raises(openai.NotFoundError):
        other.responses.retrieve(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.delete(mine.id)
    with pytest.raises(openai.NotFoundError):
        other.responses.create(model=MODEL, input="hi", previous_response_id=mine.id)
    assert oai.responses.retrieve(mine.id).id == mine.id


def test_background_response_and_cancel(oai: Any) -> None:
    started = oai.responses.create(model=MODEL, input="Count to five.", background=True, max_output_tokens=12)
    assert started.status in ("queued", "in_progress") and started.background
    for _ in range(600):
        polled = oai.responses.retrieve(started.id)
        if polled.status not in ("queued", "in_progress"):
            break
    assert polled.status in ("completed", "incomplete") and polled.output_text
    long = oai.responses.create(
        model=MODEL, input="Write a very long story.", background=True, max_output_tokens=1500, temperature=0
    )
    cancelled = oai.responses.cancel(long.id)
    assert cancelled.status == "cancelled"
    assert oai.responses.retrieve(long.id).status == "cancelled"
    with pytest.raises(openai.BadRequestError):
        oai.responses.cancel(oai.responses.create(model=MODEL, input="hi", max_output_tokens=2).id)
