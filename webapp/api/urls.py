from django.urls import path

from webapp.api.api import api
from webapp.api.docs import docs_asset, docs_page

app_name = "api"

urlpatterns = [
    path("v1/docs", docs_page, name="docs"),
    path("v1/docs/assets/<str:name>", docs_asset, name="docs-asset"),
    # ninja's own patterns, unwrapped so their names live in this app's namespace ("api:openapi-json").
    *api.urls[0],
]
