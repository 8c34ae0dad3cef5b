"""Reads over the API request log."""

from __future__ import annotations

from django.db.models import QuerySet

from webapp.api.models import RequestLog


def request_log_list(
    *, user_id: int | None = None, api_key_id: int | None = None, limit: int = 100
) -> QuerySet[RequestLog]:
    """Newest first; filtered to a user or key when given."""
    rows = RequestLog.objects.select_related("user", "api_key")
    if user_id is not None:
        rows = rows.filter(user_id=user_id)
    if api_key_id is not None:
        rows = rows.filter(api_key_id=api_key_id)
    return rows[:limit]
