from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.webapp.chat.settle import chat_background_settled, settle_async_tests  # noqa: F401
from webapp.celery import app
from webapp.chat import services as chat_services
from webapp.chat.models import Conversation


@pytest.fixture
def eager() -> Iterator[None]:
    """Celery runs tasks in this process, in the test's transaction (the real-worker test is separate)."""
    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = before


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


@pytest.fixture
def chat(alice: User) -> Conversation:
    return chat_services.conversation_create(user=alice)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    settle_async_tests(items, under=Path(__file__).parent)
