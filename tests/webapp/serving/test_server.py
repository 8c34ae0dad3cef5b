"""The graceful server's drain timeout is read when the stop signal comes (the console may change it)."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest

from webapp.core.models import EngineSettings
from webapp.serving.server import GracefulServer, read_drain_timeout


def _server(timeouts: list[float]) -> GracefulServer:
    return GracefulServer(
        application=None,
        endpoints=["tcp:port=0:interface=127.0.0.1"],
        drain_timeout=lambda: timeouts.pop(0),
        busy=lambda: 0,
        cut_streams=lambda: 0,
        abort_engines=lambda: None,
    )


def test_the_deadline_uses_the_value_at_signal_time(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _server([7.0])
    monkeypatch.setattr(server, "_check_drained", lambda: None)
    before = time.monotonic()
    server._on_signal(signal.SIGTERM)
    assert server._drain_deadline is not None
    assert before + 7.0 <= server._drain_deadline <= time.monotonic() + 7.0


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_read_drain_timeout_works_on_a_running_loop(settings: Any) -> None:
    """The reactor's thread runs an asyncio loop, where Django refuses queries: the read goes elsewhere."""
    settings.MOONCAKE_DRAIN_TIMEOUT = 12.0

    async def on_the_loop() -> float:
        return read_drain_timeout()

    assert asyncio.run(on_the_loop()) == 12.0
    EngineSettings.objects.create(drain_timeout_seconds=4)
    assert asyncio.run(on_the_loop()) == 4.0
