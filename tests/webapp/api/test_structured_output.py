"""Structured output: the JSON grammar's whitespace, end of object and EOS, and short answers that end.

The real-model cases run the bundled SmolLM2-135M-Instruct greedily through /v1/chat/completions, in fp32
(the tests' usual dtype) and bf16 (what dtype "auto" picks on a CPU with native bf16).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import llguidance
import numpy as np
import pytest
import torch
from django.test import AsyncClient

from inference import AsyncEngine
from inference.models.gguf.convert import ensure_converted
from inference.models.loader.load import load_model
from inference.models.loader.source import default_gguf_path
from tests.inference.real_model import make_engine
from tests.live_server import shared_cache_dir
from tests.webapp.api.conftest import post_json
from tests.webapp.fake_engine import FakeModelManager
from webapp.api.services.grammar import (
    GrammarLogitsProcessor,
    closed_objects,
    json_schema_grammar,
    ll_tokenizer,
)
from webapp.serving.runtime import get_runtime

TEST_CACHE_DIR = shared_cache_dir()
CHAT = "/v1/chat/completions"
MAX_TOKENS = 40
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
}
CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": CITY_SCHEMA,
    },
}
ASK_42 = [{"role": "user", "content": "Return a JSON object with one key answer whose value is 42"}]
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    TEST_CACHE_DIR.mkdir(parents=True, exist_ok=True)
    return ensure_converted(default_gguf_path(), TEST_CACHE_DIR)


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


# ---- the grammar, over the real tokenizer ----------------------------------------------------------------


def processor(tokenizer: Any, schema: dict[str, Any] | None) -> GrammarLogitsProcessor:
    grammar = json_schema_grammar(schema, param="response_format")
    return GrammarLogitsProcessor(ll_tokenizer(tokenizer, {tokenizer.eos_token_id}), grammar, prompt_len=0)


def allowed_after(tokenizer: Any, schema: dict[str, Any] | None, text: str) -> torch.Tensor:
    """Which tokens the processor leaves allowed after `text` (all -inf: `text` was refused)."""
    ids = list(tokenizer.encode(text))
    masked = processor(tokenizer, schema)(ids, torch.zeros(len(tokenizer)))
    return torch.isfinite(masked)


def accepts(tokenizer: Any, schema: dict[str, Any] | None, text: str) -> bool:
    """Whether the grammar takes `text` whole (token by token, each allowed by the mask before it)."""
    matcher = llguidance.LLMatcher(
        ll_tokenizer(tokenizer, {tokenizer.eos_token_id}), json_schema_grammar(schema, param="t"), log_level=0
    )
    for token in tokenizer.encode(text):
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        if not bits[token] or not matcher.consume_token(token):
            return False
    return matcher.is_accepting()


@pytest.mark.parametrize(
    "text",
    ['{"answer":42}', '{ "answer": 42 }', '{"answer": 42, "more": [1, 2]}', '{ "a": { "b": "x y" } }'],
)
def test_no_space_or_one_space_between_tokens_is_accepted(tokenizer: Any, text: str) -> None:
    assert accepts(tokenizer, None, text)


@pytest.mark.parametrize(
    "text",
    [
        '{  "answer": 42}',
        '{"answer":  42}',
        '{\n  "answer": 42\n}',
        '{"answer": 42}\n',
        '{"answer": 42} ',
        " {}",
    ],
)
def test_runs_of_whitespace_newlines_and_trailing_whitespace_are_refused(tokenizer: Any, text: str) -> None:
    # Bounded: a generation cannot spend its tokens on whitespace, before, inside or after the value.
    assert not accepts(tokenizer, None, text)


def test_a_space_token_is_allowed_where_the_model_wants_one(tokenizer: Any) -> None:
    allowed = allowed_after(tokenizer, None, "{")
    space_quote = tokenizer.convert_tokens_to_ids('\u0120"')  # ' "', one token
    assert allowed[space_quote] and allowed[tokenizer.convert_tokens_to_ids('"')]


@pytest.mark.parametrize("schema", [None, ANSWER_SCHEMA])
@pytest.mark.parametrize("text", ['{"answer": 42}', '{ "answer": 42 }'])
def test_eos_is_the_only_choice_once_the_top_level_object_closes(
    tokenizer: Any, schema: dict[str, Any] | None, text: str
) -> None:
    allowed = allowed_after(tokenizer, schema, text)
    assert allowed.nonzero().flatten().tolist() == [tokenizer.eos_token_id]


def test_eos_is_refused_inside_the_object(tokenizer: Any) -> None:
    allowed = allowed_after(tokenizer, ANSWER_SCHEMA, '{"answer": 42')
    assert not allowed[tokenizer.eos_token_id] and allowed.sum() > 1


def test_an_object_with_every_property_written_can_only_close(tokenizer: Any) -> None:
    # Open, the schema lets the model go on with `, "invented": {...}` instead of `}`.
    assert accepts(tokenizer, ANSWER_SCHEMA, '{"answer": 42}')
    assert not accepts(tokenizer, ANSWER_SCHEMA, '{"answer": 42, "value": 1}')
    assert accepts(tokenizer, {**ANSWER_SCHEMA, "additionalProperties": True}, '{"answer": 42, "value": 1}')
    assert accepts(tokenizer, {"type": "object"}, '{"answer": 42, "value": 1}')


# ---- closing objects: narrower, never wider or unsatisfiable ---------------------------------------------


def test_objects_that_list_their_properties_are_closed_at_every_level() -> None:
    schema = {
        "type": "object",
        "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
            "c": {"type": "array", "items": {"properties": {"d": {"type": "string"}}}},
            "e": {"anyOf": [{"properties": {"f": {}}}, {"type": "null"}]},
        },
        "$defs": {"g": {"properties": {"h": {}}}},
    }
    closed = closed_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["a"]["additionalProperties"] is False
    assert closed["properties"]["c"]["items"]["additionalProperties"] is False
    assert closed["properties"]["e"]["anyOf"][0]["additionalProperties"] is False
    assert closed["$defs"]["g"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the request's schema is left as it was


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object"},  # no properties listed: any object
        {"properties": {"a": {}}, "additionalProperties": {"type": "integer"}},
        {"properties": {"a": {}}, "additionalProperties": True},
        {"properties": {"a": {}}, "patternProperties": {"^x": {}}},
        {"properties": {"a": {}}, "unevaluatedProperties": False},
        {"properties": {"a": {}}, "required": ["a", "b"]},  # b can only be an additional property
        {"properties": {"a": {}}, "$ref": "#/$defs/x", "$defs": {"x": {"type": "object"}}},
    ],
)
def test_objects_that_say_otherwise_or_need_more_keys_stay_open(schema: dict[str, Any]) -> None:
    assert closed_objects(schema).get("additionalProperties") == schema.get("additionalProperties")


def test_branches_that_combine_are_left_alone() -> None:
    # Closing an allOf branch would forbid the other branch's keys; closing under not would widen.
    schema = {
        "allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}],
        "not": {"properties": {"c": {}}},
        "if": {"properties": {"d": {}}},
        "then": {"properties": {"e": {}}},
        "$defs": {"x": {"properties": {"a": {}}}},  # may be a $ref inside the allOf
    }
    assert closed_objects(schema) == schema


# ---- the real model, greedy, through the API -------------------------------------------------------------


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def loaded_model(request: pytest.FixtureRequest, model_dir: Path) -> Any:
    return load_model(str(model_dir), dtype=request.param, device="cpu")


@pytest.fixture
def real_client(loaded_model: Any, settings: Any, transactional_db: None) -> Iterator[AsyncClient]:
    settings.MOONCAKE_API_AUTH = "off"
    engine = AsyncEngine(make_engine(loaded_model, dtype=str(loaded_model.dtype).removeprefix("torch.")))
    manager = FakeModelManager()
    manager.register("default", None)
    manager.attach("default", engine)  # type: ignore[arg-type]
    get_runtime().install_manager(manager)
    yield AsyncClient()
    get_runtime().install_manager(None)
    engine.shutdown()


async def greedy(client: AsyncClient, **body: Any) -> tuple[dict[str, Any], int]:
    response = await post_json(client, CHAT, {"max_tokens": MAX_TOKENS, "temperature": 0, **body})
    assert response.status_code == 200, response.content
    data = response.json()
    return data["choices"][0], data["usage"]["completion_tokens"]


@pytest.mark.database
@pytest.mark.slow
async def test_json_object_answer_ends(real_client: AsyncClient) -> None:
    choice, used = await greedy(real_client, messages=ASK_42, response_format={"type": "json_object"})
    assert choice["finish_reason"] == "stop" and used <= MAX_TOKENS // 2, (choice, used)
    value = json.loads(choice["message"]["content"])
    assert isinstance(value, dict) and "answer" in value


@pytest.mark.database
@pytest.mark.slow
async def test_json_schema_answer_ends_and_validates(real_client: AsyncClient) -> None:
    response_format = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}
    choice, used = await greedy(real_client, messages=ASK_42, response_format=response_format)
    assert choice["finish_reason"] == "stop" and used <= MAX_TOKENS // 2, (choice, used)
    assert jsonschema_rs.validator_for(ANSWER_SCHEMA).is_valid(json.loads(choice["message"]["content"]))


@pytest.mark.database
@pytest.mark.slow
async def test_named_tool_call_ends_and_validates(real_client: AsyncClient) -> None:
    choice, used = await greedy(
        real_client,
        messages=ASK_WEATHER,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert choice["finish_reason"] == "tool_calls" and used <= MAX_TOKENS // 2, (choice, used)
    (call,) = choice["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert jsonschema_rs.validator_for(CITY_SCHEMA).is_valid(json.loads(call["function"]["arguments"]))
