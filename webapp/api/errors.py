"""OpenAI-shaped API errors: one exception type, rendered in one place."""

from __future__ import annotations

import json
from typing import Any, Literal

from django.http import HttpResponse

from inference.api import (
    EngineDeadError,
    EngineError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    UnknownModelError,
)

ErrorType = Literal[
    "invalid_request_error",
    "not_found_error",
    "authentication_error",
    "rate_limit_error",
    "server_error",
    "unavailable_error",
]

# Seconds a client should wait after a 503 before retrying.
UNAVAILABLE_RETRY_AFTER = 1


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: ErrorType,
        param: str | None = None,
        code: int | str | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> HttpResponse:
        resp = HttpResponse(json.dumps(self.body()), status=self.status, content_type="application/json")
        if self.retry_after is not None:
            resp["Retry-After"] = str(self.retry_after)
        return resp


def invalid(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, type="invalid_request_error", param=param, code=code)


def unavailable(message: str, *, code: str, retry_after: int = UNAVAILABLE_RETRY_AFTER) -> APIError:
    return APIError(503, message, type="unavailable_error", code=code, retry_after=retry_after)


def method_not_allowed(method: str, path: str, allowed: str) -> HttpResponse:
    """OpenAI's answer to a method a route does not take, in place of ninja's plain-text 405."""
    response = APIError(
        405,
        f"Invalid method for URL ({method} {path}): this route takes {allowed}.",
        type="invalid_request_error",
        code="method_not_allowed",
    ).response()
    response["Allow"] = allowed
    return response


def route_not_found(method: str, path: str) -> HttpResponse:
    """OpenAI's answer to an unknown API path, in place of Django's HTML 404 page."""
    return APIError(
        404, f"Invalid URL ({method} {path}).", type="not_found_error", code="unknown_url"
    ).response()


def from_engine_error(exc: Exception) -> APIError:
    """Map the engine's exceptions to HTTP semantics; callers re-raise anything this does not know."""
    if isinstance(exc, UnknownModelError):
        return APIError(
            404,
            str(exc) or "The model does not exist.",
            type="not_found_error",
            param="model",
            code="model_not_found",
        )
    if isinstance(exc, PromptTooLongError):
        return invalid(
            str(exc) or "The prompt is too long.", param="messages", code="context_length_exceeded"
        )
    if isinstance(exc, QueueFullError):
        return unavailable(str(exc) or "The server is overloaded.", code="queue_full")
    if isinstance(exc, NoModelLoadedError):
        return unavailable(str(exc) or "No model is loaded yet.", code="model_not_loaded", retry_after=5)
    if isinstance(exc, EngineDeadError):
        return unavailable(str(exc) or "The engine stopped.", code="engine_dead", retry_after=5)
    if isinstance(exc, EngineError):
        return APIError(500, str(exc) or "Engine error.", type="server_error", code="engine_error")
    if isinstance(exc, ValueError):
        return invalid(str(exc))
    raise exc
