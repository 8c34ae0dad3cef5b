"""The API's routes: ninja's operations and the docs page, with every routing error answered in JSON."""

import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt

from webapp.api.api import api
from webapp.api.docs import docs_asset, docs_page
from webapp.api.errors import method_not_allowed, route_not_found
from webapp.core.middleware import API_PREFIXES

app_name = "api"

AsyncView = Callable[..., Awaitable[HttpResponseBase]]


def _json_405(view: AsyncView) -> AsyncView:
    """ninja answers a method a route lacks with a plain-text 405: API clients get OpenAI's JSON instead."""

    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = await view(request, *args, **kwargs)
        if response.status_code == 405 and response.get("Content-Type") != "application/json":
            return method_not_allowed(str(request.method), request.path, response.get("Allow", ""))
        return response

    return csrf_exempt(wrapped)


def _json_errors(pattern: URLPattern | URLResolver) -> URLPattern | URLResolver:
    if isinstance(pattern, URLPattern) and iscoroutinefunction(pattern.callback):
        return URLPattern(pattern.pattern, _json_405(pattern.callback), pattern.default_args, pattern.name)
    return pattern


@csrf_exempt
async def unknown_route(request: HttpRequest) -> HttpResponseBase:
    return route_not_found(str(request.method), request.path)


urlpatterns = [
    path("v1/docs", docs_page, name="docs"),
    path("v1/docs/assets/<str:name>", docs_asset, name="docs-asset"),
    # ninja's own patterns, unwrapped so their names live in this app's namespace ("api:openapi-json").
    *(_json_errors(p) for p in api.urls[0]),
    # Last: any other path under the API's prefixes is an unknown route, answered in JSON too.
    re_path("^(?:{})".format("|".join(re.escape(p.lstrip("/")) for p in API_PREFIXES)), unknown_route),
]
