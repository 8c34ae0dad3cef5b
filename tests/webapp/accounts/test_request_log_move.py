"""The request log moved from the api app to accounts: rows written before the move are kept."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from tests.webapp.migrations import migrate_back_to, migrate_forward
from webapp.accounts.models import ApiKey, RequestLog

BEFORE = [("api", "0003_requestlog_source"), ("accounts", "0003_group_policy_quotas_usage_by_model")]


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_rows_logged_under_the_api_app_are_kept_by_the_move() -> None:
    apps = migrate_back_to(BEFORE)
    user = apps.get_model("auth", "User").objects.create(username="before-move")
    key = apps.get_model("accounts", "ApiKey").objects.create(
        user=user, name="k", prefix="mc-abc", secret_hash="h"
    )
    old = apps.get_model("api", "RequestLog").objects.create(
        user=user,
        api_key=key,
        source="chat",
        endpoint="chat",
        status_code=200,
        duration_s=1.5,
        prompt_tokens=7,
    )
    migrate_forward()
    row = RequestLog.objects.get(pk=old.pk)
    assert (row.user_id, row.api_key_id, row.source, row.prompt_tokens) == (user.pk, key.pk, "chat", 7)
    # The related names are the model's own, as before.
    assert ApiKey.objects.get(pk=key.pk).requests.get() == row
    assert User.objects.get(pk=user.pk).api_requests.get() == row
    RequestLog.objects.create(endpoint="completions", status_code=200, duration_s=0.1)
    assert RequestLog.objects.count() == 2
