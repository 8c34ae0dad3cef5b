"""SIGTERM: the server stops taking connections, lets a running generation finish, then exits cleanly."""

from __future__ import annotations

import json
import signal
import socket
import threading
from pathlib import Path

import httpx
import pytest

from tests.conftest import start_live_daphne, stop_live_daphne

pytestmark = pytest.mark.slow


def test_sigterm_drains_running_generations(tmp_path: Path) -> None:
    server = start_live_daphne(tmp_path / "server", api_auth="off", env={"MOONCAKE_DRAIN_TIMEOUT": "120"})
    assert server.process is not None
    lines: list[str] = []
    refused_after_signal = threading.Event()
    try:
        request = {"model": "default", "prompt": "Once upon a time", "max_tokens": 32, "stream": True,
                   "temperature": 0, "ignore_eos": True}  # fmt: skip
        with httpx.stream("POST", f"{server.url}/v1/completions", json=request, timeout=120) as response:
            assert response.status_code == 200, response.read()
            for line in response.iter_lines():
                if not line:
                    continue
                lines.append(line)
                if len(lines) == 1:
                    server.process.send_signal(signal.SIGTERM)
                    try:
                        socket.create_connection((server.host, server.port), timeout=2).close()
                    except OSError:
                        refused_after_signal.set()
        assert server.process.wait(timeout=60) == 0, server.log_tail()
    finally:
        stop_live_daphne(server)
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert finishes[-1] == "length"
    assert sum(1 for c in chunks if c.get("choices") and c["choices"][0]["text"]) > 10
    assert refused_after_signal.is_set() or "no new connections" in server.log_tail()
