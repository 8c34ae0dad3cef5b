"""The extraction job sent through the broker and run by a real worker process, not eagerly in ours."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.webapp.documents.files import make_pdf
from tests.webapp.documents.workers import celery_worker
from webapp.celery import app
from webapp.chat import services as chat_services
from webapp.documents import services
from webapp.documents.models import DocumentChunk

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_extracts_the_document(tmp_path: Path) -> None:
    from django.db import connection

    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite" and (not name or "memory" in name):
        # pytest's SQLite database lives in this process; the browser test runs a worker beside a live server.
        pytest.skip("a worker process cannot open the in-memory test database: run with PostgreSQL")
    assert app.conf.task_always_eager is False
    alice = User.objects.create_user("alice", password="pw")
    chat = chat_services.conversation_create(user=alice)
    env = {**os.environ, "DATABASE_URL": _database_url(connection.settings_dict)}
    with celery_worker(env, tmp_path / "worker.log"):
        document = services.document_upload(
            owner=alice, name="w.pdf", data=make_pdf(["first page", "second page"]), conversation=chat
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            document.refresh_from_db()
            if not document.is_busy:
                break
            time.sleep(0.3)
    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert document.state == "ready", log[-3000:]
    assert DocumentChunk.objects.filter(document=document).count() == 2
    assert "documents.extract" in log


def _database_url(db: dict[str, object]) -> str:
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
