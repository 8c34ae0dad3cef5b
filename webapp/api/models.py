"""One row per request, the API's and the chat's alike, for the console's request log."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.accounts.models import ApiKey


class RequestLog(models.Model):
    class Source(models.TextChoices):
        API = "api", "API"
        CHAT = "chat", "Chat"

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="api_requests",
    )
    # Null for chat rows (a signed-in user, no key) and anonymous API calls.
    api_key = models.ForeignKey(
        ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="requests"
    )
    # Chat replies are counted as API requests are; this says which door a row came through.
    source = models.CharField(max_length=8, choices=Source.choices, default=Source.API, db_index=True)
    # The X-Request-ID the response carried: joins this row to the server log lines of the request.
    request_id = models.CharField(max_length=128, blank=True, db_index=True)
    endpoint = models.CharField(max_length=64)
    model = models.CharField(max_length=200, blank=True)
    stream = models.BooleanField(default=False)
    status_code = models.PositiveSmallIntegerField()
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    # Seconds; null when no token was produced.
    ttft_s = models.FloatField(null=True, blank=True)
    duration_s = models.FloatField()
    finish_reason = models.CharField(max_length=32, blank=True)
    error = models.TextField(blank=True)
    # Only filled when the console's log_prompts switch is on: prompts are the users' data.
    prompt_text = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.endpoint} {self.status_code}"
