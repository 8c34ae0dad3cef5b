"""A fixture for async tests that send chat messages: the replies and titles they started end on the
test's own event loop, before the database is torn down. A reply finishing its bookkeeping, or a title
writing its request-log row, when the loop closed would go on from its thread into the teardown (a TRUNCATE
deadlock on PostgreSQL, a user left behind on SQLite)."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from webapp.chat.generation import ChatReplies
from webapp.chat.model_loading import LoadWaits
from webapp.serving.runtime import get_runtime


@pytest.fixture
async def chat_background_settled() -> AsyncIterator[None]:
    yield
    waits = get_runtime().peek_service(LoadWaits)
    if waits is not None:  # actions waiting for a model to load: they may start replies
        await waits.wait_idle()
    replies = get_runtime().peek_service(ChatReplies)
    if replies is not None:
        await replies.settle(grace=10.0)  # a reply a test left running is stopped after that


def settle_async_tests(items: list[pytest.Item], *, under: Path) -> None:
    """Give the fixture to the coroutine tests under `under` only: on a sync test (Playwright's among them)
    it would open an event loop the sync API refuses to run in. Appended to the item's fixture names (a
    usefixtures mark added after collection would not reach them), it is set up last and so torn down
    first, before the database and the runtime."""
    for item in items:
        function = getattr(item, "function", None)
        names = getattr(item, "fixturenames", None)
        if (
            item.path.is_relative_to(under)
            and function is not None
            and inspect.iscoroutinefunction(function)
            and names is not None
            and "chat_background_settled" not in names
        ):
            names.append("chat_background_settled")
