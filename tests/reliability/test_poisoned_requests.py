"""Poisoned requests on a live server with the real model: every parameter at and past its edges, mixed into
a batch of healthy streams. The healthy streams finish in full, the server keeps serving, /health stays 200,
and no answer is a 5xx."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from tests.live_server import LiveDaphne

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

HEALTHY_TOKENS = 48
BASE = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
LONG_STOP = "x" * 1024

# (extra fields, whether past an edge). Raw JSON text is used where Python's json would not send it.
CASES: list[tuple[dict[str, Any] | str, bool]] = [
    ({"top_k": 1e30}, True),
    ({"top_k": 2**63}, True),
    ({"top_k": -2}, True),
    ({"top_k": 2**31 - 1}, False),
    ({"top_k": -1}, False),
    ({"temperature": 2.0}, False),
    ({"temperature": 2.000001}, True),
    ('"temperature": NaN', True),
    ('"temperature": Infinity', True),
    ('"top_p": -Infinity', True),
    ({"top_p": 0}, True),
    ({"top_p": 1e-9}, False),
    ({"max_tokens": 0}, True),
    ({"max_tokens": 2**31}, True),
    ({"max_tokens": 2**31 - 1}, False),  # a 400 for the context, never a 5xx
    ({"min_tokens": 2**40}, True),
    ({"n": 64, "max_tokens": 1}, False),
    ({"n": 65}, True),
    ({"seed": 2**63 - 1}, False),
    ({"seed": 2**64}, True),
    ({"repetition_penalty": 0.01}, False),
    ({"repetition_penalty": 0}, True),
    ({"presence_penalty": -2.0, "frequency_penalty": 2.0}, False),
    ({"presence_penalty": -2.01}, True),
    ({"logprobs": True, "top_logprobs": 20}, False),
    ({"logprobs": True, "top_logprobs": 21}, True),
    ({"logit_bias": {str(i): 1.0 for i in range(300)}}, False),
    ({"logit_bias": {str(i): 1.0 for i in range(301)}}, True),
    ({"logit_bias": {str(2**40): 1.0}}, True),
    ({"logit_bias": {"5": 100.1}}, True),
    ({"stop": [LONG_STOP] * 16}, False),
    ({"stop": ["a"] * 17}, True),
    ({"stop": [LONG_STOP + "x"]}, True),
]


def body(extra: dict[str, Any] | str) -> str:
    if isinstance(extra, str):
        return json.dumps(BASE)[:-1] + ", " + extra + "}"
    return json.dumps(BASE | extra)


async def healthy_stream(client: httpx.AsyncClient, index: int) -> int:
    payload = {
        "messages": [{"role": "user", "content": f"Count from {index} upwards, one number a line."}],
        "max_tokens": HEALTHY_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    usage: dict[str, Any] | None = None
    async with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        assert response.status_code == 200
        lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        chunk = json.loads(line.removeprefix("data: "))
        assert "error" not in chunk, chunk
        usage = chunk.get("usage") or usage
    assert usage is not None
    return int(usage["completion_tokens"])


async def poison(client: httpx.AsyncClient, extra: dict[str, Any] | str) -> httpx.Response:
    return await client.post(
        "/v1/chat/completions", content=body(extra), headers={"Content-Type": "application/json"}
    )


async def watch_health(client: httpx.AsyncClient, stop: asyncio.Event, seen: list[int]) -> None:
    while not stop.is_set():
        seen.append((await client.get("/health", timeout=5)).status_code)
        await asyncio.sleep(0.1)


def test_poisoned_requests_never_disturb_healthy_streams(daphne_server: LiveDaphne) -> None:
    async def scenario() -> tuple[list[int], list[httpx.Response], list[int]]:
        async with httpx.AsyncClient(base_url=daphne_server.url, timeout=120) as client:
            stop, health = asyncio.Event(), []
            watcher = asyncio.create_task(watch_health(client, stop, health))
            streams = [asyncio.create_task(healthy_stream(client, i)) for i in range(4)]
            await asyncio.sleep(0.5)  # the healthy streams are decoding when the poison arrives
            answers = await asyncio.gather(*(poison(client, extra) for extra, _ in CASES))
            tokens = await asyncio.gather(*streams)
            after = await healthy_stream(client, 99)
            stop.set()
            await watcher
            return [*tokens, after], answers, health

    tokens, answers, health = asyncio.run(scenario())
    assert tokens == [HEALTHY_TOKENS] * 5
    for (extra, past_edge), answer in zip(CASES, answers, strict=True):
        assert answer.status_code < 500, (extra, answer.status_code, answer.text)
        if past_edge:
            assert answer.status_code == 400, (extra, answer.text)
            error = answer.json()["error"]
            assert error["type"] == "invalid_request_error" and error["message"], extra
        else:
            assert answer.status_code in (200, 400), (extra, answer.text)
    assert health and set(health) == {200}
    status, metrics = daphne_server.get("/metrics")
    assert status == 200
    text = metrics.decode()
    for gauge in ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc"):
        line = next(x for x in text.splitlines() if x.startswith(f"mooncake:{gauge}{{"))
        assert float(line.rsplit(" ", 1)[1]) == 0.0, line
