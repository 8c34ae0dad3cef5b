"""A cancel some library swallowed is honoured at the loop's next check; one taken back is not."""

from __future__ import annotations

import asyncio

import pytest

from webapp.serving.cancellation import raise_if_cancel_was_swallowed


async def run_loop(on_cancel: str) -> tuple[asyncio.Task[None], list[int]]:
    rounds: list[int] = []

    async def loop() -> None:
        while len(rounds) < 5:
            raise_if_cancel_was_swallowed()
            rounds.append(len(rounds))
            try:
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:
                if on_cancel == "take back":
                    task = asyncio.current_task()
                    assert task is not None
                    task.uncancel()
                # "swallow": as Python 3.11's asyncio.wait_for does when its inner future has finished

    task = asyncio.create_task(loop())
    await asyncio.sleep(0.02)
    task.cancel()
    return task, rounds


async def test_a_swallowed_cancel_ends_the_loop_at_its_next_check() -> None:
    task, rounds = await run_loop("swallow")
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert rounds == [0]


async def test_a_cancel_taken_back_leaves_the_loop_running() -> None:
    task, rounds = await run_loop("take back")
    async with asyncio.timeout(5):
        await task
    assert rounds == [0, 1, 2, 3, 4]
