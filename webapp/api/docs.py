"""The API docs page: Swagger UI served from django-ninja's bundled assets, never from a CDN.

ninja only renders its local template when "ninja" is in INSTALLED_APPS (it falls back to a CDN page
otherwise), so this app serves the page and the few asset files itself.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path

import ninja
from django.http import FileResponse, HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.urls import reverse
from django.utils.html import escape

from webapp.api.errors import route_not_found

ASSETS_DIR = Path(ninja.__file__).resolve().parent / "static" / "ninja"
ASSETS = frozenset({"swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-init.js", "favicon.png"})

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>{title}</title>
  <link rel="stylesheet" href="{assets}swagger-ui.css">
  <link rel="icon" href="{assets}favicon.png" type="image/png">
</head>
<body data-csrf-token="" data-api-csrf="">
  <script type="application/json" id="swagger-settings">{settings}</script>
  <div id="swagger-ui"></div>
  <script src="{assets}swagger-ui-bundle.js"></script>
  <script src="{assets}swagger-ui-init.js"></script>
</body>
</html>
"""


def docs_page(request: HttpRequest) -> HttpResponse:
    settings = {"url": reverse("api:openapi-json"), "layout": "BaseLayout", "deepLinking": True}
    assets = reverse("api:docs-asset", kwargs={"name": "x"})[:-1]
    html = PAGE.format(
        title="Mooncake API",
        assets=escape(assets),
        settings=json.dumps(settings).replace("</", "<\\/"),
    )
    return HttpResponse(html)


def docs_asset(request: HttpRequest, name: str) -> HttpResponseBase:
    if name not in ASSETS:
        return route_not_found(str(request.method), request.path)
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    response = FileResponse((ASSETS_DIR / name).open("rb"), content_type=content_type)
    response["Cache-Control"] = "public, max-age=86400"
    return response
