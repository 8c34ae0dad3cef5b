"""Every numeric request parameter has a finite range the engine's int64/float32 tensors can hold.

Table-driven over both generation endpoints: a value at the edge of its range gets past validation (it is
served, or refused later for a reason of its own, such as the model's context or vocabulary); a value just
past the edge, or any NaN / Infinity, is a 400 in OpenAI's error shape that names the parameter.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
BASE: dict[str, dict[str, Any]] = {CHAT: {"messages": USER}, COMPLETIONS: {"prompt": "hi"}}
# After validation, an edge value is served ("ok") or refused by a later check: the model's context
# ("context": max_tokens beyond it) or its vocabulary ("vocab": a token id the model does not have).
Outcome = Literal["ok", "context", "vocab"]


def up(x: float) -> float:
    return math.nextafter(x, math.inf)


def down(x: float) -> float:
    return math.nextafter(x, -math.inf)


def bias(n: int, start: int = 0) -> dict[str, float]:
    return {str(start + i): 1.0 for i in range(n)}


# (parameter, endpoints, fields at the edge, their outcome, fields just past the edge)
EDGES: list[tuple[str, tuple[str, ...], dict[str, Any], Outcome, list[dict[str, Any]]]] = [
    ("temperature", (CHAT, COMPLETIONS), {"temperature": 0.0}, "ok", [{"temperature": down(0.0)}]),
    ("temperature", (CHAT, COMPLETIONS), {"temperature": 2.0}, "ok", [{"temperature": up(2.0)}]),
    ("top_p", (CHAT, COMPLETIONS), {"top_p": 5e-324}, "ok", [{"top_p": 0.0}]),
    ("top_p", (CHAT, COMPLETIONS), {"top_p": 1.0}, "ok", [{"top_p": up(1.0)}]),
    ("top_k", (CHAT, COMPLETIONS), {"top_k": -1}, "ok", [{"top_k": -2}]),
    ("top_k", (CHAT, COMPLETIONS), {"top_k": INT32_MAX}, "ok",
     [{"top_k": INT32_MAX + 1}, {"top_k": 2**63}, {"top_k": 1e30}, {"top_k": 1e18}]),
    ("min_p", (CHAT, COMPLETIONS), {"min_p": 0.0}, "ok", [{"min_p": down(0.0)}]),
    ("min_p", (CHAT, COMPLETIONS), {"min_p": 1.0}, "ok", [{"min_p": up(1.0)}]),
    ("presence_penalty", (CHAT, COMPLETIONS), {"presence_penalty": -2.0}, "ok",
     [{"presence_penalty": down(-2.0)}]),
    ("presence_penalty", (CHAT, COMPLETIONS), {"presence_penalty": 2.0}, "ok",
     [{"presence_penalty": up(2.0)}]),
    ("frequency_penalty", (CHAT, COMPLETIONS), {"frequency_penalty": -2.0}, "ok",
     [{"frequency_penalty": down(-2.0)}]),
    ("frequency_penalty", (CHAT, COMPLETIONS), {"frequency_penalty": 2.0}, "ok",
     [{"frequency_penalty": up(2.0)}]),
    ("repetition_penalty", (CHAT, COMPLETIONS), {"repetition_penalty": 0.01}, "ok",
     [{"repetition_penalty": down(0.01)}, {"repetition_penalty": 1e-300}]),
    ("repetition_penalty", (CHAT, COMPLETIONS), {"repetition_penalty": 2.0}, "ok",
     [{"repetition_penalty": up(2.0)}]),
    ("seed", (CHAT, COMPLETIONS), {"seed": INT64_MIN}, "ok", [{"seed": INT64_MIN - 1}]),
    ("seed", (CHAT, COMPLETIONS), {"seed": INT64_MAX}, "ok", [{"seed": INT64_MAX + 1}]),
    ("n", (CHAT, COMPLETIONS), {"n": 1}, "ok", [{"n": 0}]),
    ("n", (CHAT, COMPLETIONS), {"n": 64}, "ok", [{"n": 65}, {"n": 2**63}]),
    ("max_tokens", (CHAT, COMPLETIONS), {"max_tokens": 1}, "ok", [{"max_tokens": 0}]),
    ("max_tokens", (CHAT, COMPLETIONS), {"max_tokens": INT32_MAX}, "context",
     [{"max_tokens": INT32_MAX + 1}, {"max_tokens": 2**63}]),
    ("min_tokens", (CHAT, COMPLETIONS), {"min_tokens": 0}, "ok", [{"min_tokens": -1}]),
    ("min_tokens", (CHAT, COMPLETIONS), {"min_tokens": INT32_MAX, "max_tokens": INT32_MAX}, "context",
     [{"min_tokens": INT32_MAX + 1, "max_tokens": INT32_MAX}]),
    ("logit_bias", (CHAT, COMPLETIONS), {"logit_bias": {"1": -100.0, "2": 100.0}}, "ok",
     [{"logit_bias": {"1": down(-100.0)}}, {"logit_bias": {"1": up(100.0)}}]),
    ("logit_bias", (CHAT, COMPLETIONS), {"logit_bias": {"0": 1.0}}, "ok", [{"logit_bias": {"-1": 1.0}}]),
    ("logit_bias", (CHAT, COMPLETIONS), {"logit_bias": {str(INT32_MAX): 1.0}}, "vocab",
     [{"logit_bias": {str(INT32_MAX + 1): 1.0}}, {"logit_bias": {str(2**64): 1.0}}]),
    ("logit_bias", (CHAT, COMPLETIONS), {"logit_bias": bias(300)}, "ok", [{"logit_bias": bias(301)}]),
    ("max_completion_tokens", (CHAT,), {"max_completion_tokens": 1}, "ok", [{"max_completion_tokens": 0}]),
    ("max_completion_tokens", (CHAT,), {"max_completion_tokens": INT32_MAX}, "context",
     [{"max_completion_tokens": INT32_MAX + 1}]),
    ("top_logprobs", (CHAT,), {"logprobs": True, "top_logprobs": 0}, "ok",
     [{"logprobs": True, "top_logprobs": -1}]),
    ("top_logprobs", (CHAT,), {"logprobs": True, "top_logprobs": 20}, "ok",
     [{"logprobs": True, "top_logprobs": 21}]),
    ("logprobs", (COMPLETIONS,), {"logprobs": 0}, "ok", [{"logprobs": -1}]),
    ("logprobs", (COMPLETIONS,), {"logprobs": 20}, "ok", [{"logprobs": 21}]),
    ("best_of", (COMPLETIONS,), {"best_of": 1}, "ok", [{"best_of": 0}]),
    ("best_of", (COMPLETIONS,), {"best_of": 64, "n": 64}, "ok",
     [{"best_of": 65, "n": 64}, {"best_of": 2**63, "n": 64}]),
    ("prompt", (COMPLETIONS,), {"prompt": [INT32_MAX]}, "vocab",
     [{"prompt": [INT32_MAX + 1]}, {"prompt": [-1]}, {"prompt": [[1], [2**63]]}]),
]  # fmt: skip

NAMES = {CHAT: "chat", COMPLETIONS: "completions"}
CASES = [
    pytest.param(url, param, edge, outcome, past, id=f"{NAMES[url]}-{param}-{i}")
    for i, (param, urls, edge, outcome, past) in enumerate(EDGES)
    for url in urls
]


def assert_param_error(response: Any, param: str) -> dict[str, Any]:
    """A 400 from request validation: OpenAI's shape, naming the parameter (not a later engine refusal)."""
    error = assert_openai_error(response, 400, "invalid_request_error")
    assert (error["param"] or "").startswith(param), error
    assert error["message"].startswith(param), error  # the validation layer's "<param>: <why>"
    assert error["code"] is None, error
    return error


@pytest.mark.database
@pytest.mark.parametrize(("url", "param", "edge", "outcome", "past"), CASES)
async def test_numeric_edges(
    client: AsyncClient,
    engine: FakeEngine,
    url: str,
    param: str,
    edge: dict[str, Any],
    outcome: Outcome,
    past: list[Any],
) -> None:
    engine.tokenizer.encode(" ".join(f"w{i}" for i in range(400)))  # a vocabulary for 300 logit_bias keys
    response = await post_json(client, url, {**BASE[url], **edge})
    if outcome == "ok":
        assert response.status_code == 200, response.content
    else:
        error = assert_openai_error(response, 400, "invalid_request_error")
        if outcome == "context":
            assert error["code"] == "context_length_exceeded", error
        else:
            assert "vocabulary" in error["message"], error
    for fields in past:
        assert_param_error(await post_json(client, url, {**BASE[url], **fields}), param)


FLOATS = [
    ("temperature", '"temperature": {}'),
    ("top_p", '"top_p": {}'),
    ("min_p", '"min_p": {}'),
    ("presence_penalty", '"presence_penalty": {}'),
    ("frequency_penalty", '"frequency_penalty": {}'),
    ("repetition_penalty", '"repetition_penalty": {}'),
    ("logit_bias", '"logit_bias": {{"1": {}}}'),
]
RAW_BASE = {CHAT: '"messages": [{"role": "user", "content": "hi"}]', COMPLETIONS: '"prompt": "hi"'}


@pytest.mark.parametrize("url", [CHAT, COMPLETIONS])
@pytest.mark.parametrize(("param", "field"), FLOATS)
@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
async def test_non_finite_floats_are_400(
    client: AsyncClient, url: str, param: str, field: str, literal: str
) -> None:
    # Python's json reads NaN and Infinity (and 1e999 overflows to inf): none is a number the engine can use.
    raw = "{" + RAW_BASE[url] + ", " + field.format(literal) + "}"
    error = assert_param_error(await post_json(client, url, raw), param)
    assert "finite" in error["message"], error


async def test_detokenize_token_ids_are_bounded(client: AsyncClient) -> None:
    for tokens in ([INT32_MAX + 1], [2**63], [-1]):
        assert_param_error(await post_json(client, "/detokenize", {"tokens": tokens}), "tokens")
    error = assert_openai_error(
        await post_json(client, "/detokenize", {"tokens": [INT32_MAX]}), 400, "invalid_request_error"
    )
    assert "vocabulary" in error["message"]
