"""Per-socket protection for the chat WebSocket: a frame rate limit, frame decoding, and re-checking the user.

Everything here that runs per frame is cheap and touches no database, so a flooding client costs only
the frame's parsing; the user re-check reads one row, at most every REVALIDATE_INTERVAL_S seconds.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth import get_user_model
from django.utils.crypto import constant_time_compare

# A burst of frames a person could plausibly send (several quick clicks), then a steady refill.
FRAME_BURST = 20
FRAME_REFILL_PER_S = 5.0
# Frames refused in a row before the socket is closed with 1008: past this it is a flood, not a burst.
FLOOD_CLOSE_AFTER = 20
# Largest text frame read, in characters: a full-length message (32,000 chars) JSON-escaped, with room.
MAX_FRAME_CHARS = 256 * 1024
# How often an open socket re-reads its user; a deactivated user or a changed password closes it.
REVALIDATE_INTERVAL_S = 5.0

CLOSE_POLICY_VIOLATION = 1008


class FrameError(Exception):
    """A frame that cannot be acted on: answered with an error event, the socket stays open."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(slots=True)
class TokenBucket:
    """`burst` frames at once, refilled at `rate` per second; `take` never blocks."""

    burst: float = FRAME_BURST
    rate: float = FRAME_REFILL_PER_S
    tokens: float = FRAME_BURST
    updated: float = field(default_factory=time.monotonic)

    def take(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(slots=True)
class FrameLimiter:
    """The bucket plus a count of refusals in a row, which decides when to give up on the socket."""

    # Read at construction, not import, so a deployment (or a test) can tune the module constants.
    bucket: TokenBucket = field(
        default_factory=lambda: TokenBucket(FRAME_BURST, FRAME_REFILL_PER_S, FRAME_BURST)
    )
    refused_in_row: int = 0

    def admit(self) -> bool:
        if self.bucket.take():
            self.refused_in_row = 0
            return True
        self.refused_in_row += 1
        return False

    @property
    def flooding(self) -> bool:
        return self.refused_in_row > FLOOD_CLOSE_AFTER


def decode_frame(text_data: str | None, bytes_data: bytes | None) -> dict[str, Any]:
    """The frame as a JSON object, or FrameError saying why not."""
    if text_data is None:
        raise FrameError("Binary frames are not accepted.")
    if len(text_data) > MAX_FRAME_CHARS:
        raise FrameError("That message is too large.")
    try:
        content = json.loads(text_data)
    except ValueError as exc:
        raise FrameError("The message was not valid JSON.") from exc
    if not isinstance(content, dict):
        raise FrameError("Expected a JSON object.")
    return content


@dataclass(slots=True)
class UserCheck:
    """Remembers who opened the socket and whether that login is still good, re-read now and then."""

    user_id: int
    session_hash: str
    checked: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, user: Any) -> UserCheck:
        return cls(user_id=user.pk, session_hash=user.get_session_auth_hash())

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return now - self.checked >= REVALIDATE_INTERVAL_S

    async def still_valid(self) -> bool:
        """False once the user is gone, deactivated, or has a new password (the session hash changes)."""
        self.checked = time.monotonic()
        user = await get_user_model()._default_manager.filter(pk=self.user_id).afirst()
        if user is None or not getattr(user, "is_active", True):
            return False
        return constant_time_compare(user.get_session_auth_hash(), self.session_hash)
