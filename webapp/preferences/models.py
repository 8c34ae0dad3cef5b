"""Each user's defaults for new chats, and the prompt library (private prompts and admins' shared ones)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

# Limits the forms, services and the library's JSON share.
MAX_TITLE_CHARS = 100
MAX_BODY_CHARS = 16_000
# Prompts one user may own; the composer's list loads a user's whole library at once.
MAX_PROMPTS_PER_USER = 200


class UserDefaults(models.Model):
    """What a user's new chats start with. Empty fields keep the server's default (console, settings)."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_preferences"
    )
    model = models.CharField(max_length=200, blank=True, default="")
    system_prompt = models.TextField(blank=True, default="")
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"defaults of user {self.user_id}"


class SavedPrompt(models.Model):
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_prompts"
    )
    title = models.CharField(max_length=MAX_TITLE_CHARS)
    body = models.TextField()
    # Shared prompts are visible to every user and editable by admins only; only admins can share.
    shared = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["title", "id"]
        indexes = [
            models.Index(fields=["owner", "title"]),
            models.Index(fields=["shared", "title"]),
        ]

    def __str__(self) -> str:
        return self.title
