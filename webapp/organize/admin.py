from django.contrib import admin

from webapp.organize.models import Feedback, Folder, Share


@admin.register(Folder)
class FolderAdmin(admin.ModelAdmin[Folder]):
    list_display = ("name", "user", "created_at")
    search_fields = ("name", "user__username")


@admin.register(Share)
class ShareAdmin(admin.ModelAdmin[Share]):
    list_display = ("prefix", "conversation", "created_at", "revoked_at")
    # Only the hash is stored; nothing here can show or recreate a link.
    readonly_fields = ("token_hash", "prefix", "conversation", "created_at")


@admin.register(Feedback)
class FeedbackAdmin(admin.ModelAdmin[Feedback]):
    list_display = ("rating", "model", "user", "updated_at")
    list_filter = ("rating", "model")
    search_fields = ("comment", "user__username")
    raw_id_fields = ("message", "user")
