"""Cancellation storms on the live server: 50 streams dropped after their first token, three rounds, then
non-streaming requests abandoned mid-flight by a client timeout. After each round the running / waiting /
KV-usage gauges return to zero within a few seconds (no leaked sequences or blocks) and a small follow-up
completion is served promptly. Figures are printed (pytest -s).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.live_server import LiveDaphne
from tests.reliability.gauges import wait_for_idle_gauges

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

STREAMS = 50
ROUNDS = 3
ABANDONED = 16
LONG = 1000  # tokens a dropped request would still have to generate: a leak would hold its blocks for long
SETTLE_WITHIN = 10.0  # seconds for the gauges to read zero after a round
FOLLOW_UP_WITHIN = 10.0


def long_payload(index: int, *, stream: bool) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": f"Write a long story about the number {index}."}],
        "max_tokens": LONG,
        "ignore_eos": True,
        "stream": stream,
    }


async def drop_after_first_token(client: httpx.AsyncClient, index: int) -> int:
    """Open a stream, read until its first content chunk, then close the response (and its connection)."""
    payload = long_payload(index, stream=True)
    async with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line.removeprefix("data: ")).get("choices") or [{}]
            if choices[0].get("delta", {}).get("content"):
                break
        # leaving the block closes the half-read response; its connection cannot be reused and is closed
    return 200


async def abandon(client: httpx.AsyncClient, index: int) -> str:
    try:
        response = await client.post(
            "/v1/chat/completions", json=long_payload(index, stream=False), timeout=httpx.Timeout(1.5)
        )
    except httpx.TimeoutException:
        return "abandoned"
    return f"answered {response.status_code}"


def follow_up(server: LiveDaphne) -> float:
    start = time.monotonic()
    with httpx.Client(base_url=server.url, timeout=FOLLOW_UP_WITHIN) as client:
        response = client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "ignore_eos": True},
        )
    elapsed = time.monotonic() - start
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["completion_tokens"] == 4
    assert elapsed < FOLLOW_UP_WITHIN
    return elapsed


def fresh_client(server: LiveDaphne) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=STREAMS + 8, max_keepalive_connections=STREAMS + 8)
    return httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits)


def test_dropped_streams_and_abandoned_requests_leak_nothing(daphne_server: LiveDaphne) -> None:
    async def storm() -> list[int]:
        async with fresh_client(daphne_server) as client:
            return await asyncio.gather(*(drop_after_first_token(client, i) for i in range(STREAMS)))

    async def abandon_all() -> list[str]:
        async with fresh_client(daphne_server) as client:
            return await asyncio.gather(*(abandon(client, i) for i in range(ABANDONED)))

    wait_for_idle_gauges(daphne_server, within=SETTLE_WITHIN)
    for round_no in range(1, ROUNDS + 1):
        start = time.monotonic()
        statuses = asyncio.run(asyncio.wait_for(storm(), timeout=180))
        storm_seconds = time.monotonic() - start
        assert statuses == [200] * STREAMS, statuses
        settle = wait_for_idle_gauges(daphne_server, within=SETTLE_WITHIN)
        latency = follow_up(daphne_server)
        print(
            f"\n[cancel] round {round_no}: {STREAMS} streams dropped after the first token in "
            f"{storm_seconds:.2f}s; gauges idle after {settle:.2f}s; follow-up in {latency:.2f}s"
        )

    start = time.monotonic()
    outcomes = asyncio.run(asyncio.wait_for(abandon_all(), timeout=60))
    abandon_seconds = time.monotonic() - start
    assert outcomes == ["abandoned"] * ABANDONED, outcomes
    settle = wait_for_idle_gauges(daphne_server, within=SETTLE_WITHIN)
    latency = follow_up(daphne_server)
    print(
        f"[cancel] {ABANDONED} non-streaming requests abandoned by a client timeout in "
        f"{abandon_seconds:.2f}s; "
        f"gauges idle after {settle:.2f}s; follow-up in {latency:.2f}s"
    )
