"""A fixture for async tests that send chat messages: the titles their replies started end on the
test's own event loop, before the database is torn down. A title still writing its request-log row when
the loop closed would go on from its thread into the teardown (a TRUNCATE deadlock on PostgreSQL, a user
left behind on SQLite)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest

from webapp.chat.generation import ChatReplies
from webapp.serving.runtime import get_runtime


@pytest.fixture(autouse=True)
async def chat_background_settled(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    yield
    replies = get_runtime().peek_service(ChatReplies)
    if replies is not None and inspect.iscoroutinefunction(request.function):
        await replies.titles.wait_idle()  # replies are the tests' own to end (some hold one)
