"""Bad input on a live server with the real model: every case gets a 4xx with the OpenAI error body, and the
server is healthy after each (a real generation still works)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
DEEP = 100_000


def chat_body(content: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": content}], "max_tokens": 2}).encode()


# (path, raw body, what it is)
CASES: list[tuple[str, bytes, str]] = [
    (CHAT, b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}', "invalid UTF-8"),
    (CHAT, b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
    (COMPLETIONS, b'{"prompt": "\\udfff x", "max_tokens": 2}', "lone low surrogate"),
    ("/tokenize", b'{"prompt": "\\ud800"}', "lone surrogate to tokenize"),
    (CHAT, b'{"messages": [{"role": "user", "content": "a\\u0000b"}], "model": "x\\u0000"}', "null bytes"),
    (CHAT, b"[" * DEEP + b"]" * DEEP, "deeply nested JSON"),
    (CHAT, b'{"messages": ' + b"[" * DEEP + b"]" * DEEP + b"}", "deeply nested field"),
    (CHAT, b'{"messages": "hello"}', "messages of the wrong type"),
    (CHAT, b'{"messages": [{"role": 5, "content": []}]}', "role of the wrong type"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": "many"}', "string for a number"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e400}', "huge number"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "n": 99999999999999999999999}', "huge int"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', "NaN"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}', "string for a bool"),
    (CHAT, b'{"messages": []}', "no messages"),
    (CHAT, b"", "empty body"),
    (CHAT, b"{", "truncated JSON"),
    (CHAT, b"null", "JSON null"),
    (COMPLETIONS, b'{"prompt": [[1, 2], "text"], "max_tokens": 2}', "mixed prompt list"),
    (COMPLETIONS, b'{"prompt": [-1, 99999999], "max_tokens": 2}', "token ids out of range"),
    (COMPLETIONS, b'{"prompt": "hi", "max_tokens": 2, "logit_bias": {"abc": 1}}', "bad logit_bias key"),
    (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "model": "no-such-model"}', "unknown model"),
]


def assert_openai_error(response: httpx.Response, what: str) -> None:
    assert 400 <= response.status_code < 500, (what, response.status_code, response.text[:300])
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"], what
    assert error["type"] in ("invalid_request_error", "not_found_error"), (what, error)


@pytest.mark.parametrize(("path", "body", "what"), CASES, ids=[c[2] for c in CASES])
def test_bad_input_is_a_4xx_and_the_server_stays_healthy(
    daphne_server: LiveDaphne, path: str, body: bytes, what: str
) -> None:
    headers = {"Content-Type": "application/json"}
    response = httpx.post(daphne_server.url + path, content=body, headers=headers, timeout=60)
    assert_openai_error(response, what)
    assert daphne_server.get("/health")[0] == 200
    served = httpx.post(daphne_server.url + CHAT, content=chat_body("Say hi"), headers=headers, timeout=60)
    assert served.status_code == 200 and served.json()["choices"][0]["message"]["content"] is not None
