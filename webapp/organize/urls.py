"""Mounted under /chat/ beside the chat's own routes (webapp/urls.py)."""

from django.urls import path

from webapp.organize import views

app_name = "organize"

urlpatterns = [
    path("organize/list/", views.sidebar_list, name="list"),
    path("organize/folders/new/", views.folder_create, name="folder-create"),
    path("organize/folders/<int:folder_id>/rename/", views.folder_rename, name="folder-rename"),
    path("organize/folders/<int:folder_id>/delete/", views.folder_delete, name="folder-delete"),
    path("organize/<int:conversation_id>/menu/", views.item_menu, name="menu"),
    path("organize/<int:conversation_id>/pin/", views.pin, name="pin"),
    path("organize/<int:conversation_id>/archive/", views.archive, name="archive"),
    path("organize/<int:conversation_id>/move/", views.move, name="move"),
    path("organize/<int:conversation_id>/shares/", views.shares, name="shares"),
    path("organize/shares/<int:share_id>/revoke/", views.share_revoke, name="share-revoke"),
    path("organize/feedback/<int:message_id>/", views.feedback, name="feedback"),
    path("shared/<str:token>/", views.shared, name="shared"),
    path("shared/<str:token>/continue/", views.shared_continue, name="shared-continue"),
]
