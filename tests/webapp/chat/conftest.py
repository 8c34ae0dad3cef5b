from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.webapp.chat.fakes import FakeEngine, FakeManager
from webapp.chat.generation import reset_generation_service
from webapp.core.engine import set_manager


@pytest.fixture(autouse=True)
def fake_engine() -> Iterator[FakeEngine]:
    """Every chat test runs against the scripted engine (browser tests use the live server's real one)."""
    engine = FakeEngine()
    set_manager(FakeManager(engine))
    reset_generation_service()
    yield engine
    set_manager(None)
    reset_generation_service()


@pytest.fixture
def fake_manager(fake_engine: FakeEngine) -> FakeManager:
    from webapp.core.engine import peek_manager

    manager = peek_manager()
    assert isinstance(manager, FakeManager)
    return manager
