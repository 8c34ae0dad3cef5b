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

from webapp.core.errors import MooncakeError, ServerFailure, Unavailable
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


class _Live:
    """A running stream: its task, and whether that task is suspended waiting for the next event."""

    __slots__ = ("task", "waiting")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.waiting = False


class LiveStreams:
    """This process's running streams (a runtime service), and the error they end with once cut."""

    def __init__(self) -> None:
        self.live: set[_Live] = set()
        self.cut_error: Callable[[], MooncakeError] | None = None


def _streams() -> LiveStreams:
    return get_runtime().service(LiveStreams)


def shutting_down_error() -> MooncakeError:
    return Unavailable(
        "The server is shutting down; the generation was cut off. Retry on another server or later.",
        code="server_shutting_down",
    )


def cut_streams(make_error: Callable[[], MooncakeError] = shutting_down_error) -> int:
    """End every running stream (and any started later) with make_error(); returns how many were running.

    Call it on the event loop's thread: a stream waiting for its next event is cancelled right there,
    one busy sending a frame notices before it waits again.
    """
    streams = _streams()
    streams.cut_error = make_error
    for live in list(streams.live):
        if live.waiting and live.task is not None:
            live.task.cancel()
    return len(streams.live)


def sse_event(payload: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
    )


async def _next_event(
    events: AsyncIterator[dict[str, Any]], live: _Live, streams: LiveStreams
) -> dict[str, Any] | None:
    """The next event, None at the end; raises the cut error once cut_streams has been called."""
    if streams.cut_error is not None:
        raise streams.cut_error()
    live.waiting = True
    try:
        return await anext(events)
    except StopAsyncIteration:
        return None
    except asyncio.CancelledError:
        # Our own cancel (cut_streams) is taken back; any other cancel (a disconnect) goes on as usual.
        if streams.cut_error is None or live.task is None or live.task.uncancel() > 0:
            raise
        raise streams.cut_error() from None
    finally:
        live.waiting = False


def _error_body(exc: MooncakeError) -> dict[str, Any]:
    return exc.body()


async def sse_frames(
    events: AsyncIterator[dict[str, Any]],
    *,
    frame: Callable[[dict[str, Any]], bytes] = sse_event,
    error_event: Callable[[MooncakeError], dict[str, Any]] = _error_body,
    done: bytes | None = DONE,
) -> AsyncIterator[bytes]:
    """Frame events; an error after the headers went out becomes an error event, then [DONE].
    The Responses API passes its own framing (typed events), error event and no [DONE]."""
    live, streams = _Live(asyncio.current_task()), _streams()
    streams.live.add(live)
    try:
        while (event := await _next_event(events, live, streams)) is not None:
            yield frame(event)
    except MooncakeError as exc:
        yield frame(error_event(exc))
    except Exception:
        logger.exception("error while streaming a response")
        yield frame(error_event(ServerFailure("Internal error while generating.")))
    finally:
        streams.live.discard(live)
        # A cut (or a consumer gone) leaves the events open: closing them aborts their engine requests.
        aclose = getattr(events, "aclose", None)
        try:
            if aclose is not None:
                await aclose()
        except Exception:
            logger.exception("error while closing a stream's events")
    if done is not None:
        yield done
