"""An expected refusal is one log line: Django's 403 for PermissionDenied comes without its traceback."""

from __future__ import annotations

import logging

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.core.log_filters import RefusalsOnOneLine

pytestmark = pytest.mark.django_db


def test_a_refused_console_action_logs_one_line_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    admin = User.objects.create_user("admin", password="admin-password-1", is_staff=True)
    owner = User.objects.create_user("boss", password="boss-password-1", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        for _ in range(3):
            response = client.post(reverse("console:user-toggle", args=[owner.pk, "active"]))
            assert response.status_code == 403
    records = [r for r in caplog.records if r.name == "django.request"]
    assert len(records) == 3
    for record in records:
        assert record.exc_info is None and record.exc_text is None
        line = record.getMessage()
        assert "\n" not in line
        assert line.startswith("Forbidden (Permission denied): /console/users/")
        assert "Only an owner can change another owner's account." in line
    assert "Traceback" not in caplog.text


def _record(status: int | None, exc: BaseException | None) -> logging.LogRecord:
    exc_info = (type(exc), exc, None) if exc is not None else None
    record = logging.LogRecord("django.request", logging.ERROR, __file__, 1, "%s: %s", ("X", "/p"), exc_info)
    if status is not None:
        record.status_code = status
    return record


def test_server_errors_keep_their_traceback() -> None:
    for status in (500, 503, None):
        record = _record(status, RuntimeError("boom"))
        assert RefusalsOnOneLine().filter(record)
        assert record.exc_info is not None and record.getMessage() == "X: /p"


def test_a_refusal_without_a_message_is_left_as_django_wrote_it() -> None:
    record = _record(400, ValueError(""))
    assert RefusalsOnOneLine().filter(record)
    assert record.exc_info is None and record.getMessage() == "X: /p"
