from django.urls import path

from webapp.chat import rename, views

app_name = "chat"

urlpatterns = [
    path("", views.index, name="index"),
    path("new/", views.new, name="new"),
    path("list/", views.conversation_list, name="list"),
    path("import/", views.import_json, name="import"),
    path("<int:conversation_id>/", views.detail, name="detail"),
    path("<int:conversation_id>/rename/", rename.rename, name="rename"),
    path("<int:conversation_id>/item/", rename.list_entry, name="item"),
    path("<int:conversation_id>/delete/", views.delete, name="delete"),
    path("<int:conversation_id>/settings/", views.update_settings, name="settings"),
    path("<int:conversation_id>/model/", views.set_model, name="model"),
    path("<int:conversation_id>/model/picker/", views.model_picker, name="model_picker"),
    path("<int:conversation_id>/export.json", views.export_json, name="export_json"),
    path("<int:conversation_id>/export.md", views.export_markdown, name="export_markdown"),
]
