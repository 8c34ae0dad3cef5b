"""How a user organises their chats (folders, pins, archive), read-only share links, and reply feedback.

Kept beside the chat's own models rather than in them: a placement row appears the first time a chat is
pinned, archived or filed, so chats that were never organised cost nothing.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.chat.models import Conversation, Message

FOLDER_NAME_MAX = 80
FEEDBACK_COMMENT_MAX = 1000


class Folder(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_folders")
    name = models.CharField(max_length=FOLDER_NAME_MAX)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="organize_folder_unique_name")]

    def __str__(self) -> str:
        return self.name


class Placement(models.Model):
    """Where one chat sits in its owner's list; no row means unpinned, not archived, in no folder."""

    conversation = models.OneToOneField(
        Conversation, on_delete=models.CASCADE, primary_key=True, related_name="placement"
    )
    pinned_at = models.DateTimeField(null=True, blank=True)
    archived_at = models.DateTimeField(null=True, blank=True)
    folder = models.ForeignKey(
        Folder, null=True, blank=True, on_delete=models.SET_NULL, related_name="placements"
    )

    def __str__(self) -> str:
        return f"placement of chat {self.conversation_id}"


class Share(models.Model):
    """A read-only link to a chat; only the token's hash is stored, so the link is shown once."""

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="shares")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=16)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"share {self.prefix}… of chat {self.conversation_id}"


class Feedback(models.Model):
    class Rating(models.TextChoices):
        UP = "up", "Thumbs up"
        DOWN = "down", "Thumbs down"

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reply_feedback"
    )
    rating = models.CharField(max_length=8, choices=Rating.choices)
    comment = models.TextField(blank=True, default="", max_length=FEEDBACK_COMMENT_MAX)
    # The reply's model at the time, so the console can filter without joining messages.
    model = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [
            models.Index(fields=["rating", "-updated_at"]),
            models.Index(fields=["model", "-updated_at"]),
        ]

    def __str__(self) -> str:
        return f"{self.rating} on message {self.message_id}"
