"""Chat requests have bounded counts and JSON schemas, and a schema too costly to compile is a quick 400.

Each limit is probed at its edge (served, with a grammar when one applies) and just past it (a 400 in
OpenAI's error shape naming the parameter). The fake engine's tokenizer is not one llguidance can read,
so grammar requests get a byte-level vocabulary instead.
"""

from __future__ import annotations

import json
import time
from typing import Any

import llguidance
import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine
from webapp.api.schemas.chat import MAX_MESSAGES, MAX_TOOLS
from webapp.api.schemas.common import MAX_JSON_SCHEMA_BYTES, MAX_JSON_SCHEMA_DEPTH, MAX_JSON_SCHEMA_PATTERNS
from webapp.api.services import grammar as grammar_service
from webapp.api.services.grammar import GrammarLogitsProcessor
from webapp.api.services.grammar_sandbox import VALIDATE_TIMEOUT_S, WALL_FACTOR

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = "/v1/chat/completions"


class _ByteVocabulary:
    """Tokens are the 256 bytes, then EOS: enough for llguidance to build masks over."""

    eos_token_id = 256
    bos_token_id = None
    tokens = [bytes([b]) for b in range(256)] + [b"</s>"]

    def __call__(self, text: bytes | str) -> list[int]:
        return list(text.encode() if isinstance(text, str) else text)


@pytest.fixture(autouse=True)
def byte_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_ByteVocabulary()))
    monkeypatch.setattr(grammar_service, "ll_tokenizer", lambda hf_tokenizer, eos_ids=None: tokenizer)


def response_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}


def tool(name: str, parameters: dict[str, Any] | None = None) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name}
    if parameters is not None:
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def depth_of(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


def sized(size: int) -> dict[str, Any]:
    """An object schema that serializes compactly to exactly `size` bytes."""
    base = {"type": "object", "description": ""}
    padding = size - len(json.dumps(base, separators=(",", ":")))
    return {"type": "object", "description": "x" * padding}


def compact_size(schema: dict[str, Any]) -> int:
    return len(json.dumps(schema, separators=(",", ":")).encode())


async def served_with_grammar(client: AsyncClient, engine: FakeEngine, body: dict[str, Any]) -> None:
    response = await post_json(client, CHAT, {**body, "max_tokens": 2})
    assert response.status_code == 200, response.content
    params = engine.calls[-1][1]
    assert any(isinstance(p, GrammarLogitsProcessor) for p in params.logits_processors or [])


async def refused(client: AsyncClient, body: dict[str, Any], param: str, words: str) -> None:
    error = assert_openai_error(await post_json(client, CHAT, body), 400, "invalid_request_error")
    assert error["param"] == param, error
    assert words in error["message"], error


# ---- counts -------------------------------------------------------------------------------------------


@pytest.mark.database
async def test_messages_up_to_the_limit(client: AsyncClient, engine: FakeEngine) -> None:
    engine.max_model_len = 100_000
    at_limit = [{"role": "user", "content": "hi"}] * MAX_MESSAGES
    response = await post_json(client, CHAT, {"messages": at_limit, "max_tokens": 2})
    assert response.status_code == 200, response.content
    over = [*at_limit, {"role": "user", "content": "hi"}]
    await refused(client, {"messages": over}, "messages", f"at most {MAX_MESSAGES}")


@pytest.mark.database
async def test_tools_up_to_the_limit(client: AsyncClient) -> None:
    tools = [tool(f"f{i}", {"type": "object"}) for i in range(MAX_TOOLS)]
    response = await post_json(client, CHAT, {"messages": USER, "tools": tools, "max_tokens": 2})
    assert response.status_code == 200, response.content
    over = {"messages": USER, "tools": [*tools, tool("one_more")]}
    await refused(client, over, "tools", f"at most {MAX_TOOLS}")


@pytest.mark.database
async def test_tool_choice_required_over_many_tools_compiles(client: AsyncClient, engine: FakeEngine) -> None:
    tools = [
        tool(f"f{i}", {"type": "object", "properties": {"x": {"type": "integer"}}}) for i in range(MAX_TOOLS)
    ]
    await served_with_grammar(client, engine, {"messages": USER, "tools": tools, "tool_choice": "required"})


# ---- JSON schema size, depth and regexes --------------------------------------------------------------


@pytest.mark.database
async def test_schema_size_limit(client: AsyncClient, engine: FakeEngine) -> None:
    at_limit = sized(MAX_JSON_SCHEMA_BYTES)
    assert compact_size(at_limit) == MAX_JSON_SCHEMA_BYTES
    await served_with_grammar(
        client, engine, {"messages": USER, "response_format": response_format(at_limit)}
    )
    over = sized(MAX_JSON_SCHEMA_BYTES + 1)
    param = "response_format.json_schema.schema"
    await refused(client, {"messages": USER, "response_format": response_format(over)}, param, "bytes")
    await refused(
        client, {"messages": USER, "tools": [tool("f", over)]}, "tools.0.function.parameters", "bytes"
    )


async def test_schema_size_counts_utf8_bytes(client: AsyncClient) -> None:
    # 3 bytes per character: a third as many characters is already too big.
    over = {"type": "object", "description": "€" * (MAX_JSON_SCHEMA_BYTES // 3)}
    body = {"messages": USER, "response_format": response_format(over)}
    await refused(client, body, "response_format.json_schema.schema", "bytes")


@pytest.mark.database
async def test_schema_depth_limit(client: AsyncClient, engine: FakeEngine) -> None:
    at_limit = {"type": "array", "items": {"enum": [[[[0]]]]}}
    while depth_of(at_limit) < MAX_JSON_SCHEMA_DEPTH:
        at_limit = {"type": "array", "items": at_limit}
    assert depth_of(at_limit) == MAX_JSON_SCHEMA_DEPTH
    await served_with_grammar(
        client, engine, {"messages": USER, "response_format": response_format(at_limit)}
    )
    over = {"type": "array", "items": at_limit}
    assert depth_of(over) == MAX_JSON_SCHEMA_DEPTH + 1
    param = "response_format.json_schema.schema"
    await refused(client, {"messages": USER, "response_format": response_format(over)}, param, "levels deep")
    body = {"messages": USER, "tools": [tool("ok"), tool("deep", over)]}
    await refused(client, body, "tools.1.function.parameters", "levels deep")


@pytest.mark.database
async def test_schema_regex_limit(client: AsyncClient, engine: FakeEngine) -> None:
    def properties(n: int) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {f"p{i}": {"type": "string", "pattern": f"^x{i}$"} for i in range(n)},
        }

    at_limit = properties(MAX_JSON_SCHEMA_PATTERNS)
    await served_with_grammar(
        client, engine, {"messages": USER, "response_format": response_format(at_limit)}
    )
    over = {**at_limit, "patternProperties": {"^y$": {"type": "integer"}}}
    param = "response_format.json_schema.schema"
    await refused(
        client, {"messages": USER, "response_format": response_format(over)}, param, "regular expressions"
    )


# ---- pathological schemas within the limits -----------------------------------------------------------

# Each is small, but compiles to a grammar past llguidance's bounds, or to an exponential regex check.
EXPLOSIVE: dict[str, dict[str, Any]] = {
    # allOf over anyOfs multiplies out: 2**12 alternatives.
    "allof_product": {
        "allOf": [
            {
                "anyOf": [
                    {"type": "object", "properties": {f"a{i}": {"type": "integer"}}},
                    {"required": [f"b{i}"]},
                ]
            }
            for i in range(12)
        ]
    },
    # As many regexes as allowed, all intersected: llguidance gives up on the emptiness check.
    "regex_intersection": {
        "allOf": [{"type": "string", "pattern": f".*a{i}.{{3}}"} for i in range(MAX_JSON_SCHEMA_PATTERNS)]
    },
    # The same product again, as alternatives of required keys: 2**14 object shapes.
    "required_product": {
        "allOf": [{"anyOf": [{"required": [f"k{i}"]}, {"required": [f"m{i}"]}]} for i in range(14)]
    },
}


@pytest.mark.database
@pytest.mark.parametrize("name", sorted(EXPLOSIVE))
async def test_pathological_schema_is_a_quick_400(client: AsyncClient, name: str) -> None:
    schema = EXPLOSIVE[name]
    assert compact_size(schema) <= MAX_JSON_SCHEMA_BYTES and depth_of(schema) <= MAX_JSON_SCHEMA_DEPTH
    started = time.monotonic()
    error = assert_openai_error(
        await post_json(client, CHAT, {"messages": USER, "response_format": response_format(schema)}),
        400,
        "invalid_request_error",
    )
    # Refused within the sandbox's budget: 2 s of the child's processor time, or its wall-clock ceiling where
    # the machine is busy (the child runs below the server's priority), never a hang.
    assert time.monotonic() - started < VALIDATE_TIMEOUT_S * WALL_FACTOR + 5
    assert error["param"] == "response_format"
    assert error["message"].startswith("unsupported JSON schema")
    assert len(error["message"]) < 400  # llguidance's expanded regexes are cut short


@pytest.mark.database
async def test_pathological_tool_schema_names_tools(client: AsyncClient) -> None:
    body = {
        "messages": USER,
        "tools": [tool("f", EXPLOSIVE["allof_product"])],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
    }
    error = assert_openai_error(await post_json(client, CHAT, body), 400, "invalid_request_error")
    assert error["param"] == "tools"


async def test_huge_enum_is_refused_by_size(client: AsyncClient) -> None:
    schema = {"enum": [f"value-{i}" for i in range(10_000)]}
    body = {"messages": USER, "response_format": response_format(schema)}
    await refused(client, body, "response_format.json_schema.schema", "bytes")


@pytest.mark.database
async def test_large_enum_within_the_size_limit_compiles(client: AsyncClient, engine: FakeEngine) -> None:
    schema = {"enum": [f"v{i}" for i in range(5_000)]}
    assert compact_size(schema) <= MAX_JSON_SCHEMA_BYTES
    await served_with_grammar(client, engine, {"messages": USER, "response_format": response_format(schema)})


def anyof_chain(levels: int, *, shared: bool) -> dict[str, Any]:
    """anyOf(object holding the next level, array of it) `levels` times, inline or as $defs."""

    def level(inner: dict[str, Any]) -> dict[str, Any]:
        return {"anyOf": [{"type": "object", "properties": {"a": inner}, "required": ["a"]},
                          {"type": "array", "items": inner}]}  # fmt: skip

    if not shared:
        schema: dict[str, Any] = {"type": "string"}
        for _ in range(levels):
            schema = level(schema)
        return schema
    defs = {f"d{i}": level({"$ref": f"#/$defs/d{i + 1}"}) for i in range(levels)}
    return {"$defs": {**defs, f"d{levels}": {"type": "string"}}, "$ref": "#/$defs/d0"}


@pytest.mark.database
async def test_deeply_nested_anyof(client: AsyncClient, engine: FakeEngine) -> None:
    # Inline, each level doubles the JSON as well: depth and size refuse it before any compile.
    inline = {"messages": USER, "response_format": response_format(anyof_chain(12, shared=False))}
    await refused(client, inline, "response_format.json_schema.schema", "levels deep")
    # Through $defs the levels are shared rules: 30 of them compile in milliseconds.
    started = time.monotonic()
    shared = {"messages": USER, "response_format": response_format(anyof_chain(30, shared=True))}
    await served_with_grammar(client, engine, shared)
    assert time.monotonic() - started < 5
