"""The API's rendering of the error hierarchy: OpenAI's JSON error body under the error's HTTP status."""

from __future__ import annotations

import json

from django.http import HttpResponse

from webapp.core.errors import MethodNotAllowed, MooncakeError, NotFound, UnsupportedMediaType


def error_response(exc: MooncakeError) -> HttpResponse:
    response = HttpResponse(json.dumps(exc.body()), status=exc.status, content_type="application/json")
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


def method_not_allowed(method: str, path: str, allowed: str) -> HttpResponse:
    """OpenAI's answer to a method a route does not take, in place of ninja's plain-text 405."""
    response = error_response(
        MethodNotAllowed(
            f"Invalid method for URL ({method} {path}): this route takes {allowed}.",
            code="method_not_allowed",
        )
    )
    response["Allow"] = allowed
    return response


def unsupported_media_type(content_type: str) -> HttpResponse:
    """415 for a body that is not JSON. A browser sends text/plain or form bodies cross-site without a CORS
    preflight, so parsing them would let any web page post to a local server in its visitor's name."""
    sent = content_type or "none"
    return error_response(
        UnsupportedMediaType(
            f"Unsupported Content-Type ({sent}): send the request body as application/json.",
            code="unsupported_media_type",
        )
    )


def route_not_found(method: str, path: str) -> HttpResponse:
    """OpenAI's answer to an unknown API path, in place of Django's HTML 404 page."""
    return error_response(NotFound(f"Invalid URL ({method} {path}).", code="unknown_url"))
