"""API errors through the real server (Daphne over Twisted), where some never reach Django at all."""

from __future__ import annotations

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
