from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from django.contrib.auth.models import User

from tests.webapp.chat.fakes import FakeEngine, FakeManager
from tests.webapp.chat.settle import chat_background_settled, settle_async_tests  # noqa: F401
from webapp.chat import services
from webapp.chat.models import Conversation

if TYPE_CHECKING:
    from webapp.serving.runtime import Runtime


@pytest.fixture(autouse=True)
def fake_engine(runtime: Runtime) -> FakeEngine:
    """Every chat test runs against the scripted engine (browser tests use the live server's real one)."""
    engine = FakeEngine()
    runtime.install_manager(FakeManager(engine))  # type: ignore[arg-type]
    return engine


@pytest.fixture
def fake_manager(fake_engine: FakeEngine, runtime: Runtime) -> FakeManager:
    manager = runtime.peek_manager()
    assert isinstance(manager, FakeManager)
    return manager


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def chat(alice: User) -> Conversation:
    return services.conversation_create(user=alice)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    settle_async_tests(items, under=Path(__file__).parent)
