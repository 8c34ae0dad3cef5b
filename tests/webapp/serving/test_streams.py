"""Engine requests as the generation service runs them: a cancel that a library swallowed still ends the
stream, and aborts its engine request, before the stream waits for its next output."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from inference.api import SamplingParams
from tests.webapp.fake_engine import FakeEngine
from webapp.serving.streams import Generation

WORDS = 200


def long_generation(engine: FakeEngine) -> Generation:
    params = SamplingParams(max_tokens=WORDS, ignore_eos=True)
    return Generation(engine, [1, 2, 3], params, request_id="r1", deadline=None)


async def swallow_a_cancel() -> None:
    """What Python 3.11's asyncio.wait_for does (redis-py sends every command through one) when the cancel
    lands as its inner future finishes: the result is returned and the CancelledError dropped."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(0.5)


async def take_a_cancel_back() -> None:
    """What asyncio.timeout and the API's stream cut do with a cancel of their own."""
    try:
        await asyncio.sleep(0.5)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        assert task is not None
        task.uncancel()


async def consume(generation: Generation, seen: list[object], handle_third: object) -> None:
    async for out in generation.outputs():
        seen.append(out)
        if len(seen) == 3:
            await handle_third()  # type: ignore[operator]


async def cancel_at_the_third_output(
    handle_third: object,
) -> tuple[asyncio.Task[None], FakeEngine, list[object]]:
    engine = FakeEngine(script=" ".join(["word"] * WORDS), token_delay=0.005)
    seen: list[object] = []
    task = asyncio.create_task(consume(long_generation(engine), seen, handle_third))
    async with asyncio.timeout(5):
        while len(seen) < 3:
            await asyncio.sleep(0.002)
    task.cancel()
    return task, engine, seen


async def test_a_cancel_swallowed_while_an_output_is_handled_ends_the_stream_before_the_next() -> None:
    task, engine, seen = await cancel_at_the_third_output(swallow_a_cancel)
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert len(seen) == 3 and engine.aborted == ["r1"]


async def test_a_cancel_taken_back_leaves_the_stream_running() -> None:
    task, _, seen = await cancel_at_the_third_output(take_a_cancel_back)
    async with asyncio.timeout(10):
        await task
    assert len(seen) == WORDS and seen[-1].finished  # type: ignore[attr-defined]
