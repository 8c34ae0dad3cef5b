from django.urls import path

from webapp.preferences import account_views, key_views, views

app_name = "preferences"

urlpatterns = [
    path("settings/", views.settings_page, name="settings"),
    path("settings/account/email/", account_views.email_change, name="account-email"),
    path("settings/account/password/", account_views.password_change, name="account-password"),
    path("settings/keys/", key_views.key_create, name="key-create"),
    path("settings/keys/<int:key_id>/revoke/", key_views.key_revoke, name="key-revoke"),
    path("settings/defaults/", views.defaults_save, name="defaults"),
    path("settings/defaults/reset/", views.defaults_reset, name="defaults-reset"),
    path("prompts/", views.prompt_create, name="prompt-create"),
    path("prompts/library.json", views.prompt_library, name="prompt-library"),
    path("prompts/<int:prompt_id>/edit/", views.prompt_edit, name="prompt-edit"),
    path("prompts/<int:prompt_id>/delete/", views.prompt_delete, name="prompt-delete"),
]
