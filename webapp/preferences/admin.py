from django.contrib import admin

from webapp.preferences.models import SavedPrompt, UserDefaults


@admin.register(SavedPrompt)
class SavedPromptAdmin(admin.ModelAdmin[SavedPrompt]):
    list_display = ("title", "owner", "shared", "updated_at")
    list_filter = ("shared",)
    search_fields = ("title", "body")


@admin.register(UserDefaults)
class UserDefaultsAdmin(admin.ModelAdmin[UserDefaults]):
    list_display = ("user", "model", "temperature", "max_tokens", "updated_at")
