"""Property-based requests from the served OpenAPI schema: no generated input may produce a 5xx.

Generation lengths are clamped so the run stays bounded on CPU; every other field is as generated.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.generation import GenerationMode

from tests.live_server import LiveDaphne

# Generation work per case: a few tokens and at most two choices (the fields' validity is untouched).
MAX_TOKENS = 2
MAX_N = 2
# Examples per operation and generation mode: six operations, valid and invalid inputs.
EXAMPLES = 5


def clamp(body: Any) -> None:
    if not isinstance(body, dict):
        return
    limits = ("max_tokens", "max_completion_tokens", "max_output_tokens")  # the last: /v1/responses
    for field in limits:
        value = body.get(field)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS:
            body[field] = MAX_TOKENS
    if not any(field in body for field in limits):
        body["max_tokens"] = body["max_output_tokens"] = MAX_TOKENS
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_N:
        body["n"] = MAX_N
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) > 2 and all(isinstance(p, (str, list)) for p in prompt):
        body["prompt"] = prompt[:2]


def check_operation(operation: Any, mode: GenerationMode, base_url: str, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate],
    )  # fmt: skip
    def no_server_error(case: Any) -> None:
        clamp(case.body)
        response = case.call(base_url=base_url, headers=headers, timeout=120)
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:500])
        if response.status_code >= 400:
            assert set(response.json()["error"]) == {"message", "type", "param", "code"}

    try:
        no_server_error()
    except Unsatisfiable:
        # GET /v1/models and /v1/models/{id}, DELETE and cancel of /v1/responses/{id} take no body and any
        # string as the id: there is no invalid input to make.
        if mode is not GenerationMode.NEGATIVE or operation.get_request_payload_content_types():
            raise


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=["valid", "invalid"])
def test_no_generated_input_is_a_server_error(
    api_server: LiveDaphne, api_key: str, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(api_server.url + "/v1/openapi.json")
    headers = {"Authorization": f"Bearer {api_key}"}
    results: list[Any] = list(schema.get_all_operations())
    operations = [result.ok() for result in results]  # raises if the served schema does not parse
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/v1/completions", "/tokenize"}
    for operation in operations:
        check_operation(operation, mode, api_server.url, headers)
