"""API errors through the real server (Daphne over Twisted), where some never reach Django at all: forms
Twisted would parse, wrong methods, bodies over the limit (refused at the socket, site pages too)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

pytestmark = pytest.mark.slow  # a real server in a subprocess (no model: about 15 s)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """Its own server, with no model loaded: every case here is refused before an engine is asked for."""
    data: Path = tmp_path_factory.mktemp("api-errors-live")
    live = start_live_daphne(data, api_auth="off", autoload=False, startup_timeout=120)
    yield live
    stop_live_daphne(live)


def assert_json_error(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, (response.headers, response.content)
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]


FORM = b'--x\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--x--\r\n'


@pytest.mark.parametrize(
    "content_type",
    ["multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=x",
     "application/x-www-form-urlencoded"],
)  # fmt: skip
def test_form_bodies_are_json_415(server: LiveDaphne, content_type: str) -> None:
    # Twisted would parse form bodies itself (an empty 400 without a boundary); Django must get them, and
    # refuses them as not JSON (once a 400 from the parser).
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
        response = httpx.post(server.url + path, content=FORM, headers={"Content-Type": content_type})
        assert_json_error(response, 415)
        assert response.json()["error"]["code"] == "unsupported_media_type"


def test_oversized_body_is_json_413_by_content_length(server: LiveDaphne) -> None:
    # Through the API's own handler and middleware (settings.API_MIDDLEWARE), not the test client's.
    body = b'{"prompt": "' + b"a" * (3 * 1024 * 1024) + b'"}'  # over Django's default 2.5 MiB
    response = httpx.post(
        server.url + "/v1/completions", content=body, headers={"Content-Type": "application/json"}
    )
    assert_json_error(response, 413)
    assert response.json()["error"]["code"] == "request_too_large"


def test_wrong_method_and_unknown_path_are_json(server: LiveDaphne) -> None:
    response = httpx.get(server.url + "/v1/chat/completions")
    assert_json_error(response, 405)
    assert response.headers["allow"] == "POST"
    assert_json_error(httpx.post(server.url + "/v1/nope", json={}), 404)


# ---- bodies over the limit, refused at Daphne's socket (webapp.serving.body_guard) ----------------------

HUNDRED_MB = 100 * 1024 * 1024


def _open(server: LiveDaphne, path: str, *headers: str) -> socket.socket:
    """A connection that has sent a POST's head, and none of its body."""
    sock = socket.create_connection((server.host, server.port), timeout=10)
    head = [f"POST {path} HTTP/1.1", f"Host: {server.host}:{server.port}", "Content-Type: application/json"]
    sock.sendall(("\r\n".join([*head, *headers]) + "\r\n\r\n").encode())
    return sock


def _response(sock: socket.socket) -> tuple[str, bytes]:
    """The status line and body of what the server sent before it closed."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1").split("\r\n", 1)[0], body


@pytest.mark.parametrize(
    ("path", "says"),
    [("/v1/chat/completions", b'"code": "request_too_large"'), ("/login/", b"Request body too large")],
)
def test_a_declared_100_mb_body_is_refused_before_it_is_sent(
    server: LiveDaphne, path: str, says: bytes
) -> None:
    with _open(server, path, f"Content-Length: {HUNDRED_MB}") as sock:
        status, body = _response(sock)  # not a byte of the body was sent: the answer cannot wait for it
    assert status == "HTTP/1.1 413 Content Too Large"
    assert says in body
    assert server.get("/version")[0] == 200


def test_a_client_waiting_for_100_continue_gets_the_413_instead(server: LiveDaphne) -> None:
    with _open(server, "/v1/completions", f"Content-Length: {HUNDRED_MB}", "Expect: 100-continue") as sock:
        status, body = _response(sock)
    assert status == "HTTP/1.1 413 Content Too Large"
    assert json.loads(body)["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/login/"])
def test_a_chunked_body_is_cut_off_at_the_limit(server: LiveDaphne, path: str) -> None:
    sent = 0
    chunk = b"x" * 65536
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    with _open(server, path, "Transfer-Encoding: chunked") as sock:

        def upload() -> None:
            nonlocal sent
            with contextlib.suppress(OSError):  # the server hangs up once the limit is passed
                while sent < HUNDRED_MB:
                    sock.sendall(frame)
                    sent += len(chunk)

        sender = threading.Thread(target=upload)
        sender.start()
        status, _ = _response(sock)
        sender.join(timeout=30)
    assert status == "HTTP/1.1 413 Content Too Large"
    assert sent < 16 * 1024 * 1024  # cut off near the limit (8 MiB at most here), not read to the end
