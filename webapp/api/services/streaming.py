"""Server-sent events exactly as OpenAI frames them: `data: {json}\\n\\n` ... `data: [DONE]\\n\\n`."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from webapp.api.errors import APIError

logger = logging.getLogger(__name__)

DONE = b"data: [DONE]\n\n"


def sse_event(payload: dict[str, Any]) -> bytes:
    return (
        b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n\n"
    )


async def sse_frames(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    """Frame events; an error after the headers went out becomes an error event, then [DONE]."""
    try:
        async for event in events:
            yield sse_event(event)
    except APIError as exc:
        yield sse_event(exc.body())
    except Exception:
        logger.exception("error while streaming a response")
        yield sse_event(APIError(500, "Internal error while generating.", type="server_error").body())
    yield DONE
