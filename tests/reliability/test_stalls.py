"""Stalls: a probe stream keeps decoding while a potentially blocking request arrives, and the probe's
inter-token gaps (between SSE content chunks) stay bounded.

Requests whose own prefill is one small step (big JSON schema, long stop strings): max gap <= 3 * median gap
+ the default `max_step_latency_ms` (0.1 s). The median decode gap here is ~15 ms.

Requests with a long prompt (~1.7-1.8k tokens: the long prompt near the 2048 context of this server, the big
chat template): a step that carries the probe's decode row also carries a prefill chunk sized by the engine
to the 100 ms target, so a 3x-median bound is impossible by design. Most such steps take about the target,
but the planner's first chunks deep into a long prompt can overshoot before its cost model catches up
(largest gaps 88-94 ms on a quiet machine, up to 0.22 s in a CI run). The bound is 0.25 s plus one median
gap (the step's own decode work and serialization).
Figures are printed (pytest -s).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from inference.config import SchedulerConfig
from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

pytestmark = [pytest.mark.slow, pytest.mark.reliability]

MAX_MODEL_LEN = 2048
PROBE_TOKENS = 150
FLOOR_S = (SchedulerConfig().max_step_latency_ms or 0) / 1000  # the default target
PREFILL_CASES = {"long_prompt", "big_chat_template"}


class GapTooLarge(AssertionError):
    """The probe's largest gap broke its bound."""


def check_gap(name: str, median: float, largest: float, limit: float) -> None:
    if largest > limit:
        raise GapTooLarge(f"{name}: max gap {largest:.3f}s > bound {limit:.3f}s (median {median:.3f}s)")


PREFILL_STALL_S = 0.25  # the target plus the planner's first-estimate overshoot next to a deep chunk


def gap_bound(name: str, median: float) -> float:
    return PREFILL_STALL_S + median if name in PREFILL_CASES else 3 * median + FLOOR_S


@pytest.fixture(scope="module")
def stall_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """Its own server: a 2,048-token context for the long prompts, and no other suite's traffic on it."""
    server = start_live_daphne(
        tmp_path_factory.mktemp("stall-server"), config={"engine": {"max_model_len": MAX_MODEL_LEN}}
    )
    yield server
    stop_live_daphne(server)


def long_prompt() -> dict[str, Any]:
    # ~1800 prompt tokens: numbers separated by spaces are roughly two tokens each for this tokenizer
    words = " ".join(str(1000 + i) for i in range(355))  # ~5 tokens a number: ~1800 with the template
    return {"messages": [{"role": "user", "content": words}], "max_tokens": 4}


def big_chat_template() -> dict[str, Any]:
    # ~6 tokens a message: ~1500 prompt tokens, inside the 2048 context
    messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "ok"} for i in range(250)]
    messages.append({"role": "user", "content": "ok"})
    return {"messages": messages, "max_tokens": 4}


def big_json_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for i in range(120):
        properties[f"field_{i}"] = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 32},
                "kind": {"enum": [f"k{i}_{j}" for j in range(8)]},
                "values": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
            },
            "required": ["name", "kind"],
        }
    schema = {"type": "object", "properties": properties, "required": list(properties)[:20]}
    return {
        "messages": [{"role": "user", "content": "Give me the JSON."}],
        "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}},
    }


def long_stop_strings() -> dict[str, Any]:
    stops = [chr(ord("a") + i) * 1024 for i in range(16)]
    return {"messages": [{"role": "user", "content": "Say something."}], "max_tokens": 8, "stop": stops}


CASES = {
    "long_prompt": long_prompt,
    "big_chat_template": big_chat_template,
    "big_json_schema": big_json_schema,
    "long_stop_strings": long_stop_strings,
}


async def probe(client: httpx.AsyncClient, started: asyncio.Event) -> list[float]:
    """Arrival times of the probe's content chunks; `started` is set after its 10th token."""
    payload = {
        "messages": [{"role": "user", "content": "Count upwards from one, one number a line."}],
        "max_tokens": PROBE_TOKENS,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
    }
    times: list[float] = []
    async with client.stream("POST", "/v1/chat/completions", json=payload) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line.removeprefix("data: "))
            assert "error" not in chunk, chunk
            if (chunk.get("choices") or [{}])[0].get("delta", {}).get("content"):
                times.append(time.perf_counter())
                if len(times) == 10:
                    started.set()
    return times


def small_json_schema() -> dict[str, Any]:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    return {
        "messages": [{"role": "user", "content": "Give me the JSON."}],
        "max_tokens": 8,
        "response_format": {"type": "json_schema", "json_schema": {"name": "small", "schema": schema}},
    }


def run_case(
    server: LiveDaphne, name: str, request: dict[str, Any], *, bound: Callable[[float], float]
) -> tuple[float, float, float, int]:
    async def scenario() -> tuple[list[float], httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
            if name == "big_json_schema":
                # Build the server's one-off grammar tokenizer first (see the cold test below), so this case
                # measures the big schema's own compilation.
                assert (
                    await client.post("/v1/chat/completions", json=small_json_schema())
                ).status_code == 200
            started = asyncio.Event()
            probe_task = asyncio.create_task(probe(client, started))
            await asyncio.wait_for(started.wait(), timeout=60)
            answer = await client.post("/v1/chat/completions", json=request)
            return await probe_task, answer

    times, answer = asyncio.run(asyncio.wait_for(scenario(), timeout=150))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    median, largest = statistics.median(gaps), max(gaps)
    prompt_tokens = (
        answer.json().get("usage", {}).get("prompt_tokens", -1) if answer.status_code == 200 else -1
    )
    print(
        f"\n[stall] {name}: answer {answer.status_code} (prompt tokens {prompt_tokens}); probe {len(times)} "
        f"chunks, gap median {median * 1000:.1f} ms, max {largest * 1000:.1f} ms, "
        f"bound {bound(median) * 1000:.1f} ms; largest gaps (ms) "
        f"{[round(g * 1000) for g in sorted(gaps, reverse=True)[:6]]}"
    )
    assert answer.status_code == 200, answer.text[:500]
    return median, largest, bound(median), len(times)


@pytest.mark.parametrize(
    "name",
    [
        "long_prompt",
        "big_chat_template",
        "big_json_schema",
        "long_stop_strings",
    ],
)
def test_blocking_request_does_not_stall_a_stream(stall_server: LiveDaphne, name: str) -> None:
    median, largest, limit, chunks = run_case(
        stall_server, name, CASES[name](), bound=lambda median: gap_bound(name, median)
    )
    assert chunks >= PROBE_TOKENS // 2  # content chunks; a few tokens may decode to no text
    check_gap(name, median, largest, limit)


COLD_FLOOR_S = 0.1


def test_first_grammar_request_does_not_stall_a_stream(tmp_path_factory: pytest.TempPathFactory) -> None:
    """llguidance's tokenizer view (~0.3 s holding the GIL) is built as the model loads, not on the first
    grammar request; this case needs a server no grammar request has reached yet: its own. Its prompt is
    ~35 tokens, so no step carries a prefill chunk anywhere near the 100 ms budget: the floor here covers
    scheduling jitter only (non-stalling short cases peak at ~45 ms)."""
    server = start_live_daphne(
        tmp_path_factory.mktemp("cold-grammar-server"), config={"engine": {"max_model_len": MAX_MODEL_LEN}}
    )
    try:
        median, largest, limit, chunks = run_case(
            server, "first_grammar_request", small_json_schema(), bound=lambda m: 3 * m + COLD_FLOOR_S
        )
    finally:
        stop_live_daphne(server)
    assert chunks >= PROBE_TOKENS // 2
    check_gap("first_grammar_request", median, largest, limit)
