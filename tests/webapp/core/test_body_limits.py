"""The ASGI edge refuses bodies over the limit (core/body_limits.BodyLimit, in front of Django in asgi.py):
a declared Content-Length before any of the body is received, a body without one as soon as it passes the
limit. The API answers in OpenAI's JSON, the site in plain text. (Daphne's own socket-level guard:
tests/webapp/serving/test_body_guard.py, and live in tests/webapp/api/test_live_errors.py; the Django
middleware: tests/webapp/api/test_body_limits.py.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from webapp.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

CHUNK = 64 * 1024


def _scope(path: str, headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 1), "server": ("testserver", 80),
    }  # fmt: skip


class Upload:
    """A large body (100 CHUNKs, more than any limit here), a CHUNK a message, counting what was taken."""

    def __init__(self, chunks: int = 100) -> None:
        self.chunks = chunks
        self.taken = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        if self.taken >= self.chunks * CHUNK:
            await asyncio.Event().wait()  # all sent: the client waits for its answer
        self.taken += CHUNK
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": self.taken < self.chunks * CHUNK}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def status(self) -> int:
        return int(next(m for m in self.sent if m["type"] == "http.response.start")["status"])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent if m["type"] == "http.response.body")

    def header(self, name: bytes) -> bytes:
        start = next(m for m in self.sent if m["type"] == "http.response.start")
        return dict(start["headers"])[name]


@pytest.mark.parametrize("path", ["/login/", "/v1/chat/completions"])
async def test_a_declared_length_over_the_limit_is_refused_before_any_body_is_received(
    settings: Any, path: str
) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = settings.MOONCAKE_MAX_REQUEST_BYTES = 1_000_000
    upload = Upload()
    await application(_scope(path, [(b"content-length", b"100000000")]), upload.receive, upload.send)
    assert upload.taken == 0
    assert upload.status == 413


async def test_the_api_refusal_is_openai_json(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    upload = Upload()
    await application(
        _scope("/v1/chat/completions", [(b"content-length", b"5000")]), upload.receive, upload.send
    )
    assert upload.header(b"content-type") == b"application/json"
    error = json.loads(upload.body)["error"]
    assert error == {
        "message": "The request body is larger than this server accepts (1000 bytes).",
        "type": "invalid_request_error",
        "param": None,
        "code": "request_too_large",
    }


async def test_the_site_refusal_is_plain_text(settings: Any) -> None:
    settings.MOONCAKE_MAX_REQUEST_BYTES = 1000
    upload = Upload()
    await application(_scope("/login/", [(b"content-length", b"5000")]), upload.receive, upload.send)
    assert upload.header(b"content-type").startswith(b"text/plain")
    assert b"at most 1000 bytes" in upload.body


@pytest.mark.parametrize(
    ("path", "setting"),
    [("/login/", "MOONCAKE_MAX_REQUEST_BYTES"), ("/v1/chat/completions", "DATA_UPLOAD_MAX_MEMORY_SIZE")],
)
async def test_a_body_without_a_length_is_cut_off_at_the_limit(
    settings: Any, path: str, setting: str
) -> None:
    setattr(settings, setting, 10 * CHUNK)
    upload = Upload()  # chunked: no Content-Length
    await application(_scope(path, []), upload.receive, upload.send)
    assert upload.status == 413
    assert upload.taken <= 11 * CHUNK  # read up to the limit and one chunk past it, no further


async def test_bodies_within_the_limit_reach_the_application(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    body = b'{"model": "x"}'
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    upload = Upload()

    async def receive() -> dict[str, Any]:
        if not messages:
            await asyncio.Event().wait()  # the client waits for its answer (Django listens for a hang-up)
        return messages.pop()

    scope = _scope("/v1/chat/completions", [(b"content-length", str(len(body)).encode())])
    await application(scope, receive, upload.send)
    assert upload.status in (400, 401, 404)  # the API's own answer, not the edge's 413
