"""SIGTERM: the server stops taking connections, lets running generations finish, then exits cleanly.

Streams still running at the drain deadline end with an error event and [DONE], not a bare close, and
the process exits 0: it used to segfault at exit (a request task left suspended on the asyncio loop
was finalized during interpreter teardown) and abort when stopped while the model was still loading.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

from tests.live_server import REPO_ROOT, free_port, start_live_daphne, stop_live_daphne

pytestmark = pytest.mark.slow

CUT_RUNS = 3
# Small enough to keep the test short; the KV cache is shrunk only to start the server faster.
FAST_STOP = {"MOONCAKE_DRAIN_TIMEOUT": "2", "PYTHONFAULTHANDLER": "1"}
SMALL_KV = {"engine": {"kv_cache_memory_bytes": 256 * 1024 * 1024}}


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


@dataclass
class _Stream:
    lines: list[str] = field(default_factory=list)
    after_signal: int = 0  # lines received after the SIGTERM
    error: str | None = None


def _stop_with_two_streams(url: str, process: subprocess.Popen[bytes], log: Path) -> list[_Stream]:
    """Start two long chat streams, SIGTERM `process` once both flow, and read them to their end."""
    streams = [_Stream(), _Stream()]
    flowing = threading.Barrier(3, timeout=120)
    signalled = threading.Event()

    def read(stream: _Stream) -> None:
        request = {"model": "default", "messages": [{"role": "user", "content": "Tell me a long story."}],
                   "max_tokens": 4000, "ignore_eos": True, "stream": True, "temperature": 0}  # fmt: skip
        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", json=request, timeout=60) as response:
                assert response.status_code == 200, response.read()
                for line in response.iter_lines():
                    if line:
                        stream.lines.append(line)
                        stream.after_signal += signalled.is_set()
                        if len(stream.lines) == 1:
                            flowing.wait()
        except Exception as exc:  # a bare close shows up here (httpx.RemoteProtocolError)
            stream.error = repr(exc)
            flowing.abort()

    readers = [threading.Thread(target=read, args=(s,)) for s in streams]
    for reader in readers:
        reader.start()
    flowing.wait()
    process.send_signal(signal.SIGTERM)
    signalled.set()
    deadline = time.monotonic() + 10
    while "no new connections" not in log.read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.05)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=2).close()
    for reader in readers:
        reader.join(timeout=60)
    return streams


def _assert_cut_or_finished(stream: _Stream) -> None:
    assert stream.error is None, stream.error
    assert stream.lines[-1] == "data: [DONE]", stream.lines[-3:]
    last = json.loads(stream.lines[-2].removeprefix("data: "))
    if "error" in last:
        assert last["error"]["type"] in ("unavailable_error", "server_error"), last
        assert last["error"]["message"]
    else:  # finished within the drain time
        assert last["choices"][0]["finish_reason"] is not None, last
    assert stream.after_signal > 0, "the drain let the generation run on"


@pytest.mark.parametrize("run", range(CUT_RUNS))
def test_sigterm_cuts_streams_at_the_drain_deadline_and_exits_0(tmp_path: Path, run: int) -> None:
    # Several runs, each must exit 0: the crash came at interpreter exit, after the streams had ended.
    server = start_live_daphne(tmp_path / "server", api_auth="off", env=FAST_STOP, config=SMALL_KV)
    assert server.process is not None
    try:
        streams = _stop_with_two_streams(server.url, server.process, server.log_path)
        code = server.process.wait(timeout=60)
    finally:
        stop_live_daphne(server)
    log = server.log_tail(200)
    assert code == 0, log
    assert "Fatal Python error" not in log
    assert "Drain timeout" in log
    for stream in streams:
        _assert_cut_or_finished(stream)


def test_mooncake_serve_exits_0_after_cutting_streams(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    config = data / "mooncake.yaml"
    config.write_text(yaml.safe_dump(SMALL_KV), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    env.update(FAST_STOP, MOONCAKE_DATA=str(data), MOONCAKE_AUTOLOAD="1", MOONCAKE_API_AUTH="off")
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "webapp.cli", "serve", "--config", str(config),
               "--settings", "webapp.settings.test", "--port", str(port), "--no-worker"]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline, ready = time.monotonic() + 300, False
        while not ready and process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                ready = httpx.get(f"{url}/health", timeout=5).status_code == 200
            time.sleep(0 if ready else 0.5)
        assert ready, log.read_text(errors="replace")[-5000:]
        streams = _stop_with_two_streams(url, process, log)
        code = process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.terminate()  # the supervisor stops its server child; a kill would orphan it
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    text = log.read_text(errors="replace")
    assert code == 0, text[-5000:]
    assert "Fatal Python error" not in text
    for stream in streams:
        _assert_cut_or_finished(stream)


@pytest.mark.parametrize("run", range(2))
def test_sigterm_while_the_model_loads_exits_0(tmp_path: Path, run: int) -> None:
    server = start_live_daphne(tmp_path / "server", env=FAST_STOP, config=SMALL_KV, wait_ready=False)
    assert server.process is not None
    try:
        # Stop as the model is being built: the loader thread is inside torch when the server exits
        # (about a second later, the drain's settling time). It crashed in most such runs, not all.
        deadline = time.monotonic() + 120
        while not re.search(r"Reusing converted GGUF|Converted \S+ in", server.log_tail(200)):
            assert time.monotonic() < deadline, server.log_tail()
            time.sleep(0.02)
        time.sleep(0.3)
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=60)
    finally:
        stop_live_daphne(server)
    assert code == 0, server.log_tail()
