"""One error hierarchy: the engine's exceptions mapped once; each class knows its HTTP and OpenAI meaning."""

from __future__ import annotations

import json
import logging

import pytest

from inference.api import (
    EngineDeadError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    RequestFailedError,
    UnknownModelError,
)
from webapp.api.errors import error_response
from webapp.core import errors


@pytest.mark.parametrize(
    ("exc", "cls", "code", "retry_after"),
    [
        (UnknownModelError("m"), errors.NotFound, "model_not_found", None),
        (PromptTooLongError("long"), errors.InvalidRequest, "context_length_exceeded", None),
        (QueueFullError("full"), errors.Unavailable, "queue_full", 1),
        (NoModelLoadedError("none"), errors.Unavailable, "model_not_loaded", 5),
        (EngineDeadError("CUDA at /opt/x"), errors.Unavailable, "engine_dead", 5),
        (RequestFailedError("CUDA at /opt/x"), errors.ServerFailure, "engine_error", None),
        (RuntimeError("CUDA at /opt/x"), errors.ServerFailure, "engine_error", None),
        (ValueError("bad top_p"), errors.InvalidRequest, None, None),
    ],
)
def test_engine_errors_map_once(exc: Exception, cls: type, code: str | None, retry_after: int | None) -> None:
    error = errors.from_engine_error(exc)
    assert type(error) is cls and error.code == code and error.retry_after == retry_after


def test_loading_is_its_own_code() -> None:
    error = errors.from_engine_error(NoModelLoadedError("x"), loading=True)
    assert isinstance(error, errors.Unavailable) and error.code == "model_loading"


def test_crash_text_stays_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="webapp.core.errors"):
        error = errors.from_engine_error(EngineDeadError("CUDA error at /opt/secret"))
    assert "CUDA" not in error.message and "/opt" not in error.message
    assert error.reference and error.reference in error.message
    assert any("/opt/secret" in r.getMessage() and error.reference in r.getMessage() for r in caplog.records)


def test_an_error_of_the_hierarchy_passes_through() -> None:
    original = errors.RateLimited("slow down", code="requests_per_minute", retry_after=0.2)
    assert errors.from_engine_error(original) is original
    assert original.retry_after == 1  # whole seconds, at least one


@pytest.mark.parametrize(
    ("status", "cls"),
    [(400, errors.InvalidRequest), (401, errors.AuthenticationFailed), (404, errors.NotFound),
     (413, errors.PayloadTooLarge), (418, errors.InvalidRequest), (503, errors.Unavailable),
     (502, errors.ServerFailure)],
)  # fmt: skip
def test_error_for_status(status: int, cls: type) -> None:
    assert type(errors.error_for_status(status, "x")) is cls


def test_the_api_renders_openai_json_with_retry_after() -> None:
    response = error_response(errors.Unavailable("busy", code="queue_full", retry_after=2.5))
    assert response.status_code == 503 and response["Retry-After"] == "3"
    assert json.loads(response.content) == {
        "error": {"message": "busy", "type": "unavailable_error", "param": None, "code": "queue_full"}
    }
    conflict = error_response(errors.Conflict("model busy", code="model_busy"))
    assert conflict.status_code == 409 and not conflict.has_header("Retry-After")
