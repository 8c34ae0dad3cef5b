"""Server-sent events exactly as OpenAI frames them: `data: {json}\\n\\n` ... `data: [DONE]\\n\\n`.

A stopping server calls `cut_streams()` when its drain time is up: every stream still running ends with
an error event and [DONE] (its engine requests aborted, as on a client disconnect) instead of a bare
connection close, and streams that would start afterwards end the same way at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from webapp.api.errors import APIError, unavailable

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


class _Live:
    """A running stream: its task, and whether that task is suspended waiting for the next event."""

    __slots__ = ("task", "waiting")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.waiting = False


_live: set[_Live] = set()
_cut: Callable[[], APIError] | None = None  # makes the error a cut stream ends with


def shutting_down_error() -> APIError:
    return unavailable(
        "The server is shutting down; the generation was cut off. Retry on another server or later.",
        code="server_shutting_down",
    )


def cut_streams(make_error: Callable[[], APIError] = shutting_down_error) -> int:
    """End every running stream (and any started later) with make_error(); returns how many were running.

    Call it on the event loop's thread: a stream waiting for its next event is cancelled right there,
    one busy sending a frame notices before it waits again.
    """
    global _cut
    _cut = make_error
    for live in list(_live):
        if live.waiting and live.task is not None:
            live.task.cancel()
    return len(_live)


def accept_streams() -> None:
    """Undo cut_streams (for tests: one process serves many)."""
    global _cut
    _cut = None


def sse_event(payload: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
    )


async def _next_event(events: AsyncIterator[dict[str, Any]], live: _Live) -> dict[str, Any] | None:
    """The next event, None at the end; raises the cut error once cut_streams has been called."""
    if _cut is not None:
        raise _cut()
    live.waiting = True
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None
    except asyncio.CancelledError:
        # Our own cancel (cut_streams) is taken back; any other cancel (a disconnect) goes on as usual.
        if _cut is None or live.task is None or live.task.uncancel() > 0:
            raise
        raise _cut() from None
    finally:
        live.waiting = False


async def sse_frames(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Frame events; an error after the headers went out becomes an error event, then [DONE]."""
    live = _Live(asyncio.current_task())
    _live.add(live)
    try:
        while (event := await _next_event(events, live)) is not None:
            yield sse_event(event)
    except APIError as exc:
        yield sse_event(exc.body())
    except Exception:
        logger.exception("error while streaming a response")
        yield sse_event(APIError(500, "Internal error while generating.", type="server_error").body())
    finally:
        _live.discard(live)
        # A cut (or a consumer gone) leaves the events open: closing them aborts their engine requests.
        aclose = getattr(events, "aclose", None)
        try:
            if aclose is not None:
                await aclose()
        except Exception:
            logger.exception("error while closing a stream's events")
    yield DONE
