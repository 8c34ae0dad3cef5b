from django.urls import path

from webapp.documents import views

app_name = "documents"

urlpatterns = [
    path("", views.index, name="index"),
    path("collections/new/", views.collection_new, name="collection_new"),
    path("collections/<int:collection_id>/delete/", views.collection_delete, name="collection_delete"),
    path("collections/<int:collection_id>/upload/", views.collection_upload, name="collection_upload"),
    path("collections/<int:collection_id>/attach/", views.collection_attach, name="collection_attach"),
    path("chat/<int:conversation_id>/tray/", views.chat_tray, name="chat_tray"),
    path("chat/<int:conversation_id>/upload/", views.chat_upload, name="chat_upload"),
    path("chat/<int:conversation_id>/attach/", views.chat_attach, name="chat_attach"),
    path(
        "chat/<int:conversation_id>/attachments/<int:attachment_id>/detach/",
        views.chat_detach,
        name="chat_detach",
    ),
    path("messages/<int:message_id>/citations/", views.message_citations, name="message_citations"),
    path("<int:document_id>/status/", views.document_status, name="status"),
    path("<int:document_id>/download/", views.document_download, name="download"),
    path("<int:document_id>/delete/", views.document_delete, name="delete"),
    path("<int:document_id>/attach/", views.document_attach, name="attach"),
]
