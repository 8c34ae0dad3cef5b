from django.urls import path
from django.views.generic import RedirectView

from webapp.console.views import dashboard, jobs, keys, models, requests, tuning, users

app_name = "console"

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="console:models"), name="index"),
    path("models/", models.models_page, name="models"),
    path("models/table/", models.models_table, name="models-table"),
    path("models/register/", models.model_register_local, name="model-register"),
    path("models/import/", models.model_register_hub, name="model-import"),
    path("models/<str:name>/load/", models.model_load, name="model-load"),
    path("models/<str:name>/unload/", models.model_unload, name="model-unload"),
    path("models/<str:name>/default/", models.model_set_default, name="model-default"),
    path("registrations/<int:pk>/delete/", models.model_delete, name="model-delete"),
    path("registrations/<int:pk>/defaults/", models.model_defaults, name="model-defaults"),
    path("tuning/", tuning.tuning, name="tuning"),
    path("metrics/", dashboard.dashboard, name="dashboard"),
    path("metrics/data/", dashboard.dashboard_data, name="dashboard-data"),
    path("requests/", requests.requests_page, name="requests"),
    path("users/", users.users_page, name="users"),
    path("users/<int:pk>/", users.user_page, name="user"),
    path("users/<int:pk>/toggle/<str:field>/", users.user_toggle, name="user-toggle"),
    path("users/<int:pk>/password/", users.user_reset_password, name="user-password"),
    path("users/<int:pk>/limits/", users.user_limits, name="user-limits"),
    path("users/<int:pk>/keys/", keys.key_create, name="key-create"),
    path("keys/<int:pk>/revoke/", keys.key_revoke, name="key-revoke"),
    path("keys/<int:pk>/limits/", keys.key_limits, name="key-limits"),
    path("jobs/", jobs.jobs_page, name="jobs"),
    path("audit/", jobs.audit_page, name="audit"),
]
