"""Malformed, oversized or unservable input: a JSON 4xx saying why, not a 500, HTML or endless 503s."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine
from webapp.accounts.models import RequestLog

pytestmark = pytest.mark.django_db(transaction=True)

LONE = "\ud800"  # a lone surrogate: json.dumps (post_json) sends it as the JSON escape "\\ud800"
TEXT_PART = {"type": "text", "text": LONE}


@pytest.fixture
def strict_tokenizer(engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Like a real (Rust) tokenizer, refuse text that is not valid Unicode."""
    encode = engine.tokenizer.encode

    def strict(text: str, *args: Any, **kwargs: Any) -> list[int]:
        text.encode("utf-8")
        return encode(text, *args, **kwargs)

    monkeypatch.setattr(engine.tokenizer, "encode", strict)


# ---- lone surrogates --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "body", "param"),
    [
        ("/v1/completions", {"prompt": LONE}, "prompt"),
        ("/v1/completions", {"prompt": ["ok", LONE]}, "prompt"),
        ("/v1/completions", {"prompt": "ok", "stop": LONE}, "stop"),
        ("/tokenize", {"prompt": LONE}, "prompt"),
        ("/tokenize", {"messages": [{"role": "user", "content": LONE}]}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": LONE}]}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [TEXT_PART]}]}, "messages"),
    ],
)  # fmt: skip
async def test_lone_surrogate_is_400(
    client: AsyncClient, engine: FakeEngine, strict_tokenizer: None, url: str, body: Any, param: str
) -> None:
    error = assert_openai_error(await post_json(client, url, body), 400, "invalid_request_error")
    assert (error["param"] or "").startswith(param), error
    assert "surrogate" in error["message"]
    assert engine.calls == []


@pytest.mark.database
async def test_model_name_with_lone_surrogate_keeps_its_log_row(client: AsyncClient) -> None:
    body = {"model": "x" + LONE, "prompt": "hi"}
    error = assert_openai_error(await post_json(client, "/v1/completions", body), 404, "not_found_error")
    assert error["code"] == "model_not_found"
    rows = [row async for row in RequestLog.objects.all()]
    assert len(rows) == 1
    assert rows[0].status_code == 404 and rows[0].model == "x\\ud800"  # escaped, not dropped
    assert "\\ud800" in rows[0].error


# ---- prompts the engine's queue could never hold ----------------------------------------------------


@pytest.fixture
def no_tokenizing(engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> list[int]:
        raise AssertionError("tokenized a request that was bound to be refused")

    monkeypatch.setattr(engine.tokenizer, "encode", refuse)


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": ["a"] * 257},
        {"prompt": [[1]] * 257},
        {"prompt": ["a"] * 5, "n": 52},
        {"prompt": ["a"] * 256, "n": 2},
    ],
)
async def test_more_sequences_than_the_cap_is_400_before_tokenizing(
    client: AsyncClient, no_tokenizing: None, body: dict[str, Any]
) -> None:
    response = await post_json(client, "/v1/completions", body)
    error = assert_openai_error(response, 400, "invalid_request_error")
    assert error["param"] == "prompt" and "256" in error["message"]
    assert "Retry-After" not in response


@pytest.mark.database
async def test_sequence_cap_edge_is_served(client: AsyncClient) -> None:
    for body in ({"prompt": ["a"] * 256, "max_tokens": 1}, {"prompt": ["a"] * 4, "n": 64, "max_tokens": 1}):
        response = await post_json(client, "/v1/completions", body)
        assert response.status_code == 200, response.content
        assert len(response.json()["choices"]) == 256


@pytest.mark.database
async def test_more_prompts_than_the_engine_queue_is_400_before_tokenizing(
    client: AsyncClient, engine: FakeEngine, no_tokenizing: None
) -> None:
    engine.max_queue_len = 4
    response = await post_json(client, "/v1/completions", {"prompt": ["a"] * 5})
    error = assert_openai_error(response, 400, "invalid_request_error")
    assert error["param"] == "prompt" and "4" in error["message"]
    assert "Retry-After" not in response and engine.calls == []


@pytest.mark.database
async def test_prompts_that_fit_the_engine_queue_are_served(client: AsyncClient, engine: FakeEngine) -> None:
    engine.max_queue_len = 4
    response = await post_json(client, "/v1/completions", {"prompt": ["a"] * 4, "n": 3, "max_tokens": 1})
    assert response.status_code == 200 and len(response.json()["choices"]) == 12


# ---- wrong methods, unknown routes, bodies that are not JSON ----------------------------------------

ROUTES = [
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/tokenize", "POST"),
    ("/detokenize", "POST"),
    ("/v1/models", "GET"),
    ("/v1/models/fake-model", "GET"),
]


@pytest.mark.parametrize(("path", "allowed"), ROUTES)
async def test_wrong_method_is_json_405(client: AsyncClient, path: str, allowed: str) -> None:
    for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
        if method == allowed:
            continue
        response = await client.generic(method, path, b"{}", content_type="application/json")
        error = assert_openai_error(response, 405, "invalid_request_error")
        assert method in error["message"] and path in error["message"]
        assert response["Allow"] == allowed


@pytest.mark.parametrize("path", ["/v1/nope", "/v1/chat/completion", "/v1/model/a/b", "/tokenizer",
                                  "/detokenize/x", "/v1/docs/assets/secret.py"])  # fmt: skip
async def test_unknown_api_path_is_json_404(client: AsyncClient, path: str) -> None:
    for method in ("GET", "POST"):
        response = await client.generic(method, path, b"{}", content_type="application/json")
        assert_openai_error(response, 404, "not_found_error")


@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data", "multipart/form-data; boundary=", "application/x-www-form-urlencoded",
     "text/plain"],
)  # fmt: skip
async def test_non_json_body_is_json_415(client: AsyncClient, content_type: str) -> None:
    # Once a JSON 400 from the parser; now refused by Content-Type before parsing (test_content_type.py).
    body = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n'
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"):
        response = await client.post(path, data=body, content_type=content_type)
        error = assert_openai_error(response, 415, "invalid_request_error")
        assert error["code"] == "unsupported_media_type"


@pytest.mark.database
async def test_body_over_the_upload_limit_is_json_413(client: AsyncClient, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = await post_json(client, "/v1/completions", {"prompt": "a " * 1000})
    error = assert_openai_error(response, 413, "invalid_request_error")
    assert error["code"] == "request_too_large" and "1000" in error["message"]
    ok = await post_json(client, "/v1/chat/completions", {"messages": USER, "max_tokens": 1})
    assert ok.status_code == 200
