"""Stored Responses API objects (/v1/responses with store: true): what retrieve, input_items and
previous_response_id read back. Owned by the API key's user; each row expires (MOONCAKE_RESPONSES_DAYS)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class StoredResponse(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        IN_PROGRESS = "in_progress"
        COMPLETED = "completed"
        INCOMPLETE = "incomplete"
        FAILED = "failed"
        CANCELLED = "cancelled"

    # OpenAI's id ("resp_" + hex): clients address the row by it.
    id = models.CharField(max_length=64, primary_key=True)
    # Null for anonymous callers (auth off): those rows are shared by every anonymous caller.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="responses"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)
    status = models.CharField(max_length=16, choices=Status.choices)
    background = models.BooleanField(default=False)
    previous_response_id = models.CharField(max_length=64, blank=True)
    # This request's input items (normalized, with ids); the previous responses' live on their own rows.
    input_items = models.JSONField(default=list)
    # The Response object as the API last rendered it.
    body = models.JSONField(default=dict)

    def __str__(self) -> str:
        return self.id
