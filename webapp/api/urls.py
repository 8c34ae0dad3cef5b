"""The API's routes: ninja's operations and the docs page, with every routing error answered in JSON."""

import re
from collections.abc import Awaitable, Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt

from webapp.api.api import ROUTERS, api
from webapp.api.docs import docs_asset, docs_page
from webapp.api.errors import method_not_allowed, route_not_found, unsupported_media_type
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


# Methods whose body an operation parses; ninja reads it as JSON whatever Content-Type says.
BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_json(content_type: str) -> bool:
    # request.content_type is the media type alone: Django splits off parameters such as charset.
    return content_type.strip().lower() == "application/json"


def _no_body(request: HttpRequest) -> bool:
    # Neither a type nor a length: nothing to refuse, and ninja's 400 names the missing fields.
    return not request.META.get("CONTENT_TYPE") and request.META.get("CONTENT_LENGTH") in (None, "", "0")


def _json_only(view: AsyncView, methods: frozenset[str]) -> AsyncView:
    """415 for a body that is not JSON, checked before ninja reads it (see errors.unsupported_media_type).
    Only for `methods` the route takes: any other method gets its 405 as before."""

    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method in methods and not is_json(request.content_type or "") and not _no_body(request):
            return unsupported_media_type(request.META.get("CONTENT_TYPE", ""))
        return await view(request, *args, **kwargs)

    return wrapped


def _route_methods(name: str | None) -> frozenset[str]:
    """Every method of the route whose URL name (ninja names it after a view function) is `name`."""
    return frozenset(
        method
        for router in ROUTERS
        for path_view in router.path_operations.values()
        if any(op.view_func.__name__ == name for op in path_view.operations)
        for op in path_view.operations
        for method in op.methods
    )


def _json_errors(pattern: URLPattern | URLResolver) -> URLPattern | URLResolver:
    if isinstance(pattern, URLPattern) and iscoroutinefunction(pattern.callback):
        view = pattern.callback
        body_methods = BODY_METHODS & _route_methods(pattern.name)
        if body_methods:
            view = _json_only(view, body_methods)
        return URLPattern(pattern.pattern, _json_405(view), pattern.default_args, pattern.name)
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
