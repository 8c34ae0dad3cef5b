"""The live server the conformance suites share: real Daphne, real default model, API keys required."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

# A queue that holds the 20-stream cancellation storm but overflows under a flood of 96 requests;
# a short context keeps the long-prompt cases cheap.
SERVER_CONFIG = {
    "model": {"max_model_len": 2048},
    "engine": {"max_num_seqs": 16, "max_queue_len": 32, "kv_cache_memory_bytes": 512 * 2**20},
}
MODEL = "SmolLM2-135M-Instruct"


def create_key(server: LiveDaphne, username: str, **limits: int) -> str:
    """A new API key's secret, made through the server's own database."""
    args = ", ".join(f"{k}={v!r}" for k, v in limits.items())
    code = (
        "from django.contrib.auth.models import User\n"
        "from webapp.accounts.services import api_key_create\n"
        f"user, _ = User.objects.get_or_create(username={username!r})\n"
        f"print('SECRET=' + api_key_create(user=user, name='conformance', {args}).secret)\n"
    )
    out = server.shell(code)
    match = re.search(r"SECRET=(\S+)", out)
    if match is None:
        raise RuntimeError(f"no key in: {out!r}")
    return match.group(1)


def metric(server: LiveDaphne, name: str) -> float:
    """The value of one engine gauge from /metrics."""
    text = httpx.get(server.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


@pytest.fixture(scope="session")
def api_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    data: Path = tmp_path_factory.mktemp("api-live")
    server = start_live_daphne(data, api_auth="required", config=SERVER_CONFIG)
    yield server
    stop_live_daphne(server)


@pytest.fixture(scope="session")
def api_key(api_server: LiveDaphne) -> str:
    return create_key(api_server, "conformance")


@pytest.fixture(scope="session")
def oai(api_server: LiveDaphne, api_key: str) -> OpenAI:
    # No retries: 429/503 must reach the tests, and every retry would cost model time.
    return OpenAI(base_url=api_server.url + "/v1", api_key=api_key, max_retries=0, timeout=120)
