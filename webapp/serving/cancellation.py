"""A cancel some library swallowed, honoured at the next safe point.

Python 3.11's asyncio.wait_for returns its inner result, dropping the CancelledError, when a cancel lands
as the inner future finishes. redis-py wraps every socket write in one, so a Stop or a client disconnect
that lands on a channel-layer send, a limiter call or a channel-layer receive is lost, and the loop that
should have ended goes on. The task still counts the request (Task.cancelling() > 0; a deliberate
uncancel(), as asyncio.timeout and the API's stream cut make, takes it back), so long-running loops check
it before each wait.
"""

from __future__ import annotations

import asyncio


def raise_if_cancel_was_swallowed() -> None:
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
