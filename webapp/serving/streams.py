"""Engine requests as the generation service runs them: admission errors first, deadlines, merging.

Closing an engine iterator aborts its request (the engine's contract), so every path out of here, a
client disconnect's CancelledError included, ends in `aclose()` on the engine's generator.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator

from django.conf import settings

from inference.api import EngineClient, RequestOutput, SamplingParams
from webapp.core.errors import MooncakeError, Unavailable, from_engine_error
from webapp.serving.cancellation import raise_if_cancel_was_swallowed

DEFAULT_REQUEST_TIMEOUT_S = 600.0


def request_timeout_s() -> float:
    """settings.MOONCAKE_API_REQUEST_TIMEOUT: seconds a request may run before generation is cut off."""
    return float(getattr(settings, "MOONCAKE_API_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT_S))


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def timed_out_error() -> MooncakeError:
    return Unavailable("The request timed out before any token was generated.", code="timeout")


class Generation:
    """One engine request. start() surfaces admission errors; outputs() yields until finished or deadline."""

    def __init__(
        self,
        engine: EngineClient,
        prompt: list[int],
        params: SamplingParams,
        *,
        request_id: str,
        deadline: float | None,
    ) -> None:
        # Nothing is submitted until the first anext(); closing the generator before then is free.
        self._iter: AsyncGenerator[RequestOutput, None] = engine.generate(
            prompt, params, request_id=request_id
        )
        self._deadline = deadline
        self._primed: RequestOutput | None = None
        self.prompt_len = len(prompt)
        self.last: RequestOutput | None = None
        self.first_token_at: float | None = None
        self.timed_out = False

    async def _next(self) -> RequestOutput | None:
        """The next output, None when finished; sets timed_out (and aborts) at the deadline."""
        raise_if_cancel_was_swallowed()  # a Stop or disconnect lost while the last output was handled
        try:
            async with asyncio.timeout_at(self._deadline):
                out = await anext(self._iter)
        except StopAsyncIteration:
            return None
        except TimeoutError:
            self.timed_out = True
            await self.close()
            return None
        except MooncakeError:
            raise
        except Exception as exc:
            raise from_engine_error(exc) from exc
        self.last = out
        if self.first_token_at is None and any(o.token_ids for o in out.outputs):
            self.first_token_at = time.monotonic()
        return out

    async def start(self) -> None:
        """Wait for the first output: queue-full and prompt errors become HTTP errors, not stream events."""
        self._primed = await self._next()
        if self._primed is None and self.timed_out:
            raise timed_out_error()

    async def outputs(self) -> AsyncIterator[RequestOutput]:
        try:
            if self._primed is not None:
                out, self._primed = self._primed, None
                yield out
                if out.finished:
                    return
            while (nxt := await self._next()) is not None:
                yield nxt
                if nxt.finished:
                    return
        finally:
            await self.close()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._iter.aclose()

    def produced_tokens(self) -> bool:
        return self.last is not None and any(o.token_ids for o in self.last.outputs)


async def start_all(generations: list[Generation]) -> None:
    """Start every generation; on any failure close them all so no request is left running."""
    try:
        await asyncio.gather(*(g.start() for g in generations))
    except BaseException:
        await asyncio.gather(*(g.close() for g in generations), return_exceptions=True)
        raise


async def merged(generations: list[Generation]) -> AsyncGenerator[tuple[int, RequestOutput], None]:
    """Outputs of several generations as they come, tagged with the generation's index."""
    if len(generations) == 1:
        async for out in generations[0].outputs():
            yield 0, out
        return
    queue: asyncio.Queue[tuple[int, RequestOutput | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, generation: Generation) -> None:
        try:
            async for out in generation.outputs():
                await queue.put((index, out))
        except BaseException as exc:
            await queue.put((index, exc))
            raise
        await queue.put((index, None))

    tasks = [asyncio.create_task(pump(i, g)) for i, g in enumerate(generations)]
    try:
        remaining = len(tasks)
        while remaining:
            index, item = await queue.get()
            if item is None:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(g.close() for g in generations), return_exceptions=True)


async def run_to_end(generations: list[Generation]) -> None:
    """Drive non-streaming generations to completion (results stay on each Generation.last)."""
    async for _ in merged(generations):
        pass
