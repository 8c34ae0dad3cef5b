"""The NinjaAPI instance: OpenAI-shaped errors for everything, 400 (never 422) for bad input."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import HttpError, ValidationError

from webapp.api.embedding_views import router as embeddings_router
from webapp.api.errors import error_response
from webapp.api.responses_views import router as responses_router
from webapp.api.views import router
from webapp.core.body_limits import request_too_large
from webapp.core.errors import InvalidRequest, MooncakeError, ServerFailure, error_for_status

logger = logging.getLogger(__name__)

api = NinjaAPI(
    title="Mooncake OpenAI-compatible API",
    version="1",
    description=(
        "OpenAI-compatible chat completions, responses, completions, embeddings, models and tokenizer "
        "endpoints."
    ),
    openapi_url="/v1/openapi.json",
    docs_url=None,  # webapp.api.docs serves a page without CDN assets
    urls_namespace="api",
)
# Every router of the API; urls.py reads their operations to wrap each route.
ROUTERS = (router, responses_router, embeddings_router)
for _router in ROUTERS:
    api.add_router("", _router)


def _location(loc: list[Any] | tuple[Any, ...]) -> str | None:
    # Drop ninja's leading "body" and the model's own name: clients know fields by their JSON path.
    parts = [str(p) for p in loc if p not in ("body", "payload")]
    return ".".join(parts) or None


@api.exception_handler(MooncakeError)
def _mooncake_error(request: HttpRequest, exc: MooncakeError) -> HttpResponse:
    return error_response(exc)


def _message(error: dict[str, Any]) -> str:
    return str(error.get("msg", "invalid")).removeprefix("Value error, ")


@api.exception_handler(ValidationError)
def _validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    errors = exc.errors or [{"msg": "invalid request", "loc": []}]
    first = errors[0]
    param = _location(first.get("loc", []))
    messages = "; ".join(f"{_location(e.get('loc', [])) or 'body'}: {_message(e)}" for e in errors[:5])
    return error_response(InvalidRequest(messages, param=param))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # ninja raises HttpError(400, "Cannot parse request body") for malformed JSON, among others.
    return error_response(error_for_status(exc.status_code, str(exc)))


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    # Raised when ninja reads request.body past DATA_UPLOAD_MAX_MEMORY_SIZE: the client's input, not a 500.
    # webapp.core.body_limits refuses most such bodies by Content-Length first; this catches the rest
    # (chunked bodies, which carry no length).
    return request_too_large(settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 0)


@api.exception_handler(Exception)
def _unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
    logger.exception("unhandled error in %s", request.path)
    return error_response(ServerFailure("Internal server error."))
