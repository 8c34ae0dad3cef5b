"""Property-based requests from the served OpenAPI schema: no generated input may produce a 5xx.

Generation lengths are clamped so the run stays bounded on CPU; every other field is as generated.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.conftest import LiveDaphne

# Generation work per case: a few tokens and at most two choices (the fields' validity is untouched).
MAX_TOKENS = 2
MAX_N = 2


@pytest.fixture(scope="session")
def live_schema(api_server: LiveDaphne) -> Any:
    return schemathesis.openapi.from_url(api_server.url + "/v1/openapi.json")


schema = schemathesis.pytest.from_fixture("live_schema")


def clamp(body: Any) -> None:
    if not isinstance(body, dict):
        return
    for field in ("max_tokens", "max_completion_tokens"):
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
            body[field] = MAX_TOKENS
    if "max_tokens" not in body and "max_completion_tokens" not in body:
        body["max_tokens"] = MAX_TOKENS
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_N:
        body["n"] = MAX_N
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) > 2 and all(isinstance(p, (str, list)) for p in prompt):
        body["prompt"] = prompt[:2]


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_no_generated_input_is_a_server_error(case: Any, api_server: LiveDaphne, api_key: str) -> None:
    clamp(case.body)
    response = case.call(base_url=api_server.url, headers={"Authorization": f"Bearer {api_key}"}, timeout=120)
    assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
    if response.status_code >= 400:
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
