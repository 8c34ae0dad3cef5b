from django.urls import path

from webapp.serving import views
from webapp.serving.metrics_view import metrics

app_name = "serving"

urlpatterns = [
    path("health", views.health, name="health"),
    path("metrics", metrics, name="metrics"),
]
