"""API bodies must be application/json: browsers send text/plain and form bodies cross-site without a CORS
preflight, so accepting them would let any web page post to a local server in its visitor's name."""

from __future__ import annotations

import json

import pytest
from django.test import AsyncClient

from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine

pytestmark = pytest.mark.django_db(transaction=True)

BODIES = {
    "/v1/chat/completions": {"messages": USER, "max_tokens": 1},
    "/v1/completions": {"prompt": "hi", "max_tokens": 1},
    "/tokenize": {"prompt": "hi"},
    "/detokenize": {"tokens": [0]},
}


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data",
     "application/jsonx", "text/json", ""],
)  # fmt: skip
async def test_valid_json_under_another_content_type_is_415(
    client: AsyncClient, engine: FakeEngine, path: str, content_type: str
) -> None:
    response = await client.post(path, data=json.dumps(BODIES[path]), content_type=content_type)
    error = assert_openai_error(response, 415, "invalid_request_error")
    assert error["code"] == "unsupported_media_type" and error["param"] is None
    assert "application/json" in error["message"]
    assert not engine.calls, "the view ran"


@pytest.mark.database
@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    "content_type", ["application/json", "application/json; charset=utf-8", "Application/JSON; charset=UTF-8"]
)
async def test_json_content_types_are_served(client: AsyncClient, path: str, content_type: str) -> None:
    response = await client.post(path, data=json.dumps(BODIES[path]), content_type=content_type)
    assert response.status_code == 200, response.content


async def test_other_methods_keep_their_405(client: AsyncClient) -> None:
    # The Content-Type check is for the methods a route takes; a wrong method is still a wrong method.
    for path, method in (("/v1/models", "POST"), ("/v1/chat/completions", "PUT")):
        response = await client.generic(method, path, b"x", content_type="text/plain")
        assert_openai_error(response, 405, "invalid_request_error")
    ok = await client.get("/v1/models")
    assert ok.status_code == 200


async def test_a_post_without_any_body_is_still_a_400(client: AsyncClient) -> None:
    # No Content-Type and no body: nothing to refuse, and the 400 says which fields are missing.
    response = await client.generic("POST", "/v1/chat/completions")
    assert_openai_error(response, 400, "invalid_request_error")


async def test_openapi_documents_413_and_415_for_body_routes(client: AsyncClient) -> None:
    paths = (await client.get("/v1/openapi.json")).json()["paths"]
    for path in BODIES:
        assert {"413", "415"} <= set(paths[path]["post"]["responses"])
    assert "415" not in paths["/v1/models"]["get"]["responses"]
