from django.urls import path

from webapp.serving.metrics_view import metrics

app_name = "serving"

# /health is routed in webapp/urls.py: its view (webapp.api.health) recognises API keys, which serving cannot.
urlpatterns = [
    path("metrics", metrics, name="metrics"),
]
