"""Overload: a server with a small engine (4 running, 8 waiting) gets four times what it can hold at once.

Every answer is 200, 429 or 503 (the refusals carry Retry-After), nothing hangs, /health keeps answering in
under a second while the load runs, and the running / waiting / KV-usage gauges return to zero afterwards.
The measured figures are printed (pytest -s); only the properties above are asserted.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne
from tests.reliability.gauges import wait_for_idle_gauges

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

MAX_NUM_SEQS = 4
MAX_QUEUE_LEN = 8
CONCURRENT = 4 * (MAX_NUM_SEQS + MAX_QUEUE_LEN)  # 48
REQUEST_TIMEOUT = 90.0  # per request: a hang fails the test instead of blocking the suite


@pytest.fixture(scope="module")
def small_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """Its own server: a small batch and queue, so four times their capacity is a test-sized load."""
    server = start_live_daphne(
        tmp_path_factory.mktemp("overload-server"),
        config={"engine": {"max_num_seqs": MAX_NUM_SEQS, "max_queue_len": MAX_QUEUE_LEN}},
    )
    yield server
    stop_live_daphne(server)


class HealthPoller:
    """Polls /health from its own thread and connection, so the load's event loop cannot skew the timing."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5.0) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    status = client.get("/health").status_code
                except httpx.HTTPError as exc:
                    self.errors.append(repr(exc))
                    status = 0
                self.latencies.append(time.perf_counter() - start)
                self.statuses[status] += 1
                self._stop.wait(0.05)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


async def one_request(client: httpx.AsyncClient, index: int) -> tuple[int, str | None, str]:
    """(status, Retry-After, problem or ""): a 200 stream must end in [DONE] with no error chunk."""
    stream = index % 2 == 0
    payload: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"Say a word about the number {index}."}],
        "max_tokens": 8,
        "temperature": 0,
        "stream": stream,
    }
    if not stream:
        response = await client.post("/v1/chat/completions", json=payload)
        problem = ""
        if response.status_code == 200 and not response.json().get("choices"):
            problem = f"no choices: {response.text[:200]}"
        return response.status_code, response.headers.get("Retry-After"), problem
    async with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        if response.status_code != 200:
            await response.aread()
            return response.status_code, response.headers.get("Retry-After"), ""
        lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    problem = "" if lines and lines[-1] == "data: [DONE]" else f"stream did not end in [DONE]: {lines[-2:]}"
    for line in lines[:-1]:
        if "error" in json.loads(line.removeprefix("data: ")):
            problem = f"error chunk: {line[:200]}"
    return 200, None, problem


def test_four_times_the_queue_capacity(small_server: LiveDaphne) -> None:
    async def load() -> list[tuple[int, str | None, str] | BaseException]:
        limits = httpx.Limits(max_connections=CONCURRENT + 4, max_keepalive_connections=CONCURRENT + 4)
        client = httpx.AsyncClient(base_url=small_server.url, timeout=REQUEST_TIMEOUT, limits=limits)
        async with client:
            tasks = []
            for index in range(CONCURRENT):  # a quick ramp: all 48 in flight within ~0.25 s
                tasks.append(asyncio.create_task(one_request(client, index)))
                await asyncio.sleep(0.005)
            return await asyncio.gather(*tasks, return_exceptions=True)

    wait_for_idle_gauges(small_server, within=10)
    started = time.monotonic()
    with HealthPoller(small_server.url) as health:
        results = asyncio.run(asyncio.wait_for(load(), timeout=REQUEST_TIMEOUT + 30))
        time.sleep(0.3)  # a few more probes after the last answer
    load_seconds = time.monotonic() - started
    settle = wait_for_idle_gauges(small_server, within=10)

    failures = [r for r in results if isinstance(r, BaseException)]
    answers = [r for r in results if not isinstance(r, BaseException)]
    codes = Counter(status for status, _, _ in answers)
    latencies = sorted(health.latencies)
    print(
        f"\n[overload] {CONCURRENT} requests in {load_seconds:.2f}s: statuses {dict(codes)}, "
        f"client errors {len(failures)}; /health probes {len(latencies)} "
        f"(statuses {dict(health.statuses)}), max {max(latencies) * 1000:.0f} ms, "
        f"p50 {latencies[len(latencies) // 2] * 1000:.0f} ms; gauges idle {settle:.2f}s after the load"
    )

    assert not failures, failures[:3]  # a timeout here is a hang
    assert set(codes) <= {200, 429, 503}, codes
    assert codes[200] > 0, codes
    for status, retry_after, problem in answers:
        assert not problem, problem
        if status in (429, 503):
            assert retry_after is not None and int(retry_after) >= 1, (status, retry_after)
    assert not health.errors, health.errors[:3]
    assert len(latencies) >= 5
    assert max(latencies) < 1.0, f"/health took {max(latencies):.3f}s under load"
    assert set(health.statuses) == {200}, health.statuses
