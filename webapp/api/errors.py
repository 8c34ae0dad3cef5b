"""OpenAI-shaped API errors: one exception type, rendered in one place."""

from __future__ import annotations

import json
import logging
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
from webapp.core.request_id import error_reference

logger = logging.getLogger(__name__)

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




def unsupported_media_type(content_type: str) -> HttpResponse:
    """415 for a body that is not JSON. A browser sends text/plain or form bodies cross-site without a CORS
    preflight, so parsing them would let any web page post to a local server in its visitor's name."""
    sent = content_type or "none"
    return APIError(
        415,
        f"Unsupported Content-Type ({sent}): send the request body as application/json.",
        type="invalid_request_error",
        code="unsupported_media_type",
    ).response()


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
    # A dead engine's or a failed request's text can hold crash details (CUDA errors, paths, tracebacks):
    # clients get a generic sentence and the request id, the log gets the details under the same id.
    if isinstance(exc, EngineDeadError):
        reference = _log_engine_failure(exc)
        return unavailable(
            f"The engine stopped and is being restarted; retry shortly (request id {reference}).",
            code="engine_dead",
            retry_after=5,
        )
    if isinstance(exc, EngineError):
        reference = _log_engine_failure(exc)
        return APIError(
            500,
            f"The engine failed to process this request (request id {reference}).",
            type="server_error",
            code="engine_error",
        )
    if isinstance(exc, ValueError):
        return invalid(str(exc))
    raise exc


def _log_engine_failure(exc: Exception) -> str:
    reference = error_reference()
    # The request id is on the line already when there is a request; the reference covers the rest.
    logger.error("engine failure (reference %s): %s: %s", reference, type(exc).__name__, exc)
    return reference
