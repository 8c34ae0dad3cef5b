"""One error hierarchy for every front end: services raise these, each channel renders them its own way.

The API renders an error as OpenAI's JSON body under its HTTP status (webapp.api.errors), the chat as an
inline notice in the conversation (webapp.chat.errors), the console as a message on the page. A service
never knows which channel called it; the engine's own exceptions are mapped here, once.
"""

from __future__ import annotations

import logging
import math
from typing import Any, ClassVar, Literal

from inference.api import (
    EngineDeadError,
    EngineError,
    NoModelLoadedError,
    PromptTooLongError,
    QueueFullError,
    UnknownModelError,
    UnsupportedTaskError,
    UpstreamRejectedError,
    UpstreamUnavailableError,
)
from webapp.core.request_id import error_reference

logger = logging.getLogger(__name__)

OpenAIErrorType = Literal[
    "invalid_request_error",
    "authentication_error",
    "permission_error",
    "not_found_error",
    "rate_limit_error",
    "server_error",
    "unavailable_error",
]

# Seconds a client should wait after a 503 before retrying.
UNAVAILABLE_RETRY_AFTER_S = 1
# A model that is loading or restarting needs longer than a full queue.
MODEL_RETRY_AFTER_S = 5


class MooncakeError(Exception):
    """Something a caller did or met that it should be told about; `status` is its HTTP meaning."""

    status: ClassVar[int] = 500
    openai_type: ClassVar[OpenAIErrorType] = "server_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        reference: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        # Whole seconds, at least one: what a Retry-After header can say.
        self.retry_after = None if retry_after is None else max(1, math.ceil(retry_after))
        # The id under which the log holds details this message leaves out.
        self.reference = reference

    def body(self) -> dict[str, Any]:
        """OpenAI's error object."""
        return {
            "error": {
                "message": self.message,
                "type": self.openai_type,
                "param": self.param,
                "code": self.code,
            }
        }


class InvalidRequest(MooncakeError):
    status, openai_type = 400, "invalid_request_error"


class AuthenticationFailed(MooncakeError):
    status, openai_type = 401, "authentication_error"


class PermissionDenied(MooncakeError):
    status, openai_type = 403, "permission_error"


class NotFound(MooncakeError):
    status, openai_type = 404, "not_found_error"


class MethodNotAllowed(MooncakeError):
    status, openai_type = 405, "invalid_request_error"


class Conflict(MooncakeError):
    """The target is busy with something else (a reply already running, a model mid-job)."""

    status, openai_type = 409, "invalid_request_error"


class PayloadTooLarge(MooncakeError):
    status, openai_type = 413, "invalid_request_error"


class UnsupportedMediaType(MooncakeError):
    status, openai_type = 415, "invalid_request_error"


class RateLimited(MooncakeError):
    status, openai_type = 429, "rate_limit_error"


class ServerFailure(MooncakeError):
    status, openai_type = 500, "server_error"


class Unavailable(MooncakeError):
    """Overloaded, loading or restarting: worth retrying after `retry_after` seconds."""

    status, openai_type = 503, "unavailable_error"

    def __init__(
        self, message: str, *, retry_after: float = UNAVAILABLE_RETRY_AFTER_S, **kwargs: Any
    ) -> None:
        super().__init__(message, retry_after=retry_after, **kwargs)


_BY_STATUS: dict[int, type[MooncakeError]] = {
    cls.status: cls
    for cls in (
        InvalidRequest,
        AuthenticationFailed,
        PermissionDenied,
        NotFound,
        MethodNotAllowed,
        PayloadTooLarge,
        UnsupportedMediaType,
        RateLimited,
        ServerFailure,
        Unavailable,
    )
}


def error_for_status(status: int, message: str, **kwargs: Any) -> MooncakeError:
    """The error class for an HTTP status a library raised (ninja's HttpError); 5xx unknown ones are 500s."""
    cls = _BY_STATUS.get(status) or (InvalidRequest if 400 <= status < 500 else ServerFailure)
    return cls(message, **kwargs)


def from_engine_error(exc: BaseException, *, loading: bool = False) -> MooncakeError:
    """The engine's exceptions in the hierarchy; `loading`: the model asked for is still loading."""
    if isinstance(exc, MooncakeError):
        return exc
    if isinstance(exc, UnknownModelError):
        return NotFound(str(exc) or "The model does not exist.", param="model", code="model_not_found")
    if isinstance(exc, PromptTooLongError):
        return InvalidRequest(
            str(exc) or "The prompt is too long.", param="messages", code="context_length_exceeded"
        )
    if isinstance(exc, QueueFullError):
        return Unavailable(str(exc) or "The server is overloaded.", code="queue_full")
    if isinstance(exc, NoModelLoadedError) and loading:
        return Unavailable(
            "The model is still loading; retry shortly.",
            code="model_loading",
            retry_after=MODEL_RETRY_AFTER_S,
        )
    if isinstance(exc, NoModelLoadedError):
        return Unavailable(
            str(exc) or "No model is loaded yet.", code="model_not_loaded", retry_after=MODEL_RETRY_AFTER_S
        )
    if isinstance(exc, UnsupportedTaskError):  # an embedding model asked to generate, or the reverse
        return InvalidRequest(str(exc), param="model", code="model_not_supported")
    if isinstance(exc, UpstreamRejectedError):
        # The upstream's own words about the client's request (an `openai` engine): theirs to fix.
        return InvalidRequest(str(exc) or "The model's server refused the request.", param=exc.param)
    if isinstance(exc, ValueError) and not isinstance(exc, EngineError):
        return InvalidRequest(str(exc))
    # A dead engine's or a failed request's text can hold crash details (CUDA errors, paths, tracebacks):
    # callers get a generic sentence and a reference, the log gets the details under the same reference.
    reference = error_reference()
    logger.error("engine failure (reference %s): %s: %s", reference, type(exc).__name__, exc)
    if isinstance(exc, UpstreamUnavailableError):
        return Unavailable(
            f"The model's server is unavailable; retry shortly (request id {reference}).",
            code="upstream_unavailable",
            retry_after=exc.retry_after or MODEL_RETRY_AFTER_S,
            reference=reference,
        )
    if isinstance(exc, EngineDeadError):
        return Unavailable(
            f"The engine stopped and is being restarted; retry shortly (request id {reference}).",
            code="engine_dead",
            retry_after=MODEL_RETRY_AFTER_S,
            reference=reference,
        )
    return ServerFailure(
        f"The engine failed to process this request (request id {reference}).",
        code="engine_error",
        reference=reference,
    )
