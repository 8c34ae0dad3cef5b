"""The request pipeline announces each request to the engine while preparing it (burst batching)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER
from tests.webapp.fake_engine import FakeEngine

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


class Notices:
    """Stands in for AsyncEngine.expect(): counts notices held and records the count at each generate."""

    def __init__(self, engine: FakeEngine) -> None:
        self.held = 0
        self.entered = 0
        self.held_at_generate: list[int] = []
        generate = engine.generate

        def recording_generate(*args: Any, **kwargs: Any) -> Any:
            self.held_at_generate.append(self.held)
            return generate(*args, **kwargs)

        engine.generate = recording_generate  # type: ignore[method-assign]
        engine.expect = self.expect  # type: ignore[method-assign]

    @contextlib.contextmanager
    def expect(self) -> Iterator[None]:
        self.held += 1
        self.entered += 1
        try:
            yield
        finally:
            self.held -= 1


async def test_requests_are_announced_until_submitted(client: AsyncClient, engine: FakeEngine) -> None:
    notices = Notices(engine)
    response = await post_json(client, "/v1/chat/completions", {"messages": USER, "max_tokens": 3})
    assert response.status_code == 200
    assert notices.entered == 1 and notices.held_at_generate == [1] and notices.held == 0


async def test_a_rejected_request_releases_its_notice(client: AsyncClient, engine: FakeEngine) -> None:
    notices = Notices(engine)
    response = await post_json(client, "/v1/chat/completions", {"messages": USER, "max_tokens": 10**9})
    assert response.status_code == 400
    assert notices.entered == 1 and notices.held == 0 and notices.held_at_generate == []
