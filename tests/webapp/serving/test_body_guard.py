"""Daphne's requests refuse a body over the limit as its bytes arrive (serving/body_guard), before Twisted has
buffered it and before any application starts: bytes fed to a real HTTP channel of the graceful server.
(The same through a real server's socket: tests/webapp/api/test_live_errors.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from daphne.http_protocol import HTTPFactory
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from webapp.serving.server import GracefulServer

LIMIT = 1000


@pytest.fixture
def limits(settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = LIMIT
    settings.MOONCAKE_MAX_REQUEST_BYTES = LIMIT


class Connection:
    """One client connection to the graceful server's HTTP factory, its answers in `transport`."""

    def __init__(self) -> None:
        self.server = GracefulServer(
            application=None,
            endpoints=["tcp:port=0:interface=127.0.0.1"],
            drain_timeout=lambda: 0.0,
            busy=lambda: 0,
            cut_streams=lambda: 0,
            abort_engines=lambda: None,
        )
        self.server.connections = {}
        self.started: list[dict[str, Any]] = []
        self.server.create_application = self._start  # type: ignore[method-assign]
        self.channel = HTTPFactory(self.server).buildProtocol(IPv4Address("TCP", "127.0.0.1", 5000))
        self.transport = StringTransport(peerAddress=IPv4Address("TCP", "127.0.0.1", 5000))
        self.channel.makeConnection(self.transport)

    def _start(self, protocol: Any, scope: dict[str, Any]) -> None:
        self.started.append(scope)
        return None  # Daphne then abandons the request: enough to know the application would have run

    def send(self, data: bytes) -> None:
        self.channel.dataReceived(data)

    @property
    def answer(self) -> tuple[str, bytes]:
        head, _, body = self.transport.value().partition(b"\r\n\r\n")
        return head.decode("latin-1").split("\r\n", 1)[0], body


def head(path: str, *headers: str) -> bytes:
    return ("\r\n".join([f"POST {path} HTTP/1.1", "Host: testserver", *headers]) + "\r\n\r\n").encode()


@pytest.mark.parametrize(
    ("path", "says"),
    [("/v1/chat/completions", b'"code": "request_too_large"'), ("/login/", b"at most 1000 bytes")],
)
def test_a_declared_length_over_the_limit_is_refused_at_the_headers(
    limits: None, path: str, says: bytes
) -> None:
    conn = Connection()
    conn.send(head(path, "Content-Length: 104857600", "Expect: 100-continue"))
    status, body = conn.answer
    assert status == "HTTP/1.1 413 Content Too Large"  # and no "100 Continue" first
    assert says in body
    assert conn.transport.disconnecting and conn.started == []


def test_the_api_refusal_is_openai_json(limits: None) -> None:
    conn = Connection()
    conn.send(head("/v1/completions", "Content-Length: 5000", "Content-Type: application/json"))
    assert json.loads(conn.answer[1])["error"]["type"] == "invalid_request_error"
    assert b"Content-Type: application/json" in conn.transport.value()


def test_a_chunked_body_is_cut_off_at_the_limit_and_its_rest_ignored(limits: None) -> None:
    conn = Connection()
    conn.send(head("/v1/chat/completions", "Transfer-Encoding: chunked"))
    chunk = b"400\r\n" + b"x" * 1024 + b"\r\n"  # 1 KiB: past the limit at once
    conn.send(chunk + b"0\r\n\r\n")  # the rest, and the body's end, in the same read
    assert conn.answer[0] == "HTTP/1.1 413 Content Too Large"
    assert conn.transport.disconnecting and conn.started == []


def test_bodies_within_the_limit_reach_the_application(limits: None) -> None:
    conn = Connection()
    body = b'{"prompt": "hi"}'
    conn.send(head("/v1/completions", f"Content-Length: {len(body)}") + body)
    assert [scope["path"] for scope in conn.started] == ["/v1/completions"]
    assert conn.transport.value() == b""
