"""Per-socket protection for the chat WebSocket: a frame rate limit, frame decoding, re-checking the login.

Everything here that runs per frame is cheap and touches no database, so a flooding client costs only
the frame's parsing; the login re-check reads the user's row and the session's, at most every
REVALIDATE_INTERVAL_S seconds as frames come and, for a socket that only listens, once each period.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.utils.crypto import constant_time_compare

# A burst of frames a person could plausibly send (several quick clicks), then a steady refill.
FRAME_BURST = 20
FRAME_REFILL_PER_S = 5.0
# Frames refused in a row before the socket is closed: past this it is a flood, not a burst.
FLOOD_CLOSE_AFTER = 20
# Largest text frame read, in characters: a full-length message (32,000 chars) JSON-escaped, with room.
MAX_FRAME_CHARS = 256 * 1024
# How often an open socket re-reads its login; a deactivated user, a changed password or a session ended
# (logged out, expired) closes it.
REVALIDATE_INTERVAL_S = 5.0

# A server may close with 1000 or an application code (3000-4999) only: Daphne's WebSocket library refuses
# 1008 itself, and the consumer then crashed (the client saw 1011). 4000 + 1008's meaning: policy violation.
CLOSE_POLICY_VIOLATION = 4008


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
    """Remembers who opened the socket, with which session, and whether that login is still good."""

    user_id: int
    session_hash: str
    # The session the socket's cookie named (AuthMiddlewareStack put it in the scope); None: no session,
    # so the login counts as gone at the first re-check.
    session_key: str | None = None
    checked: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, user: Any, session: Any = None) -> UserCheck:
        key = getattr(session, "session_key", None) if session is not None else None
        return cls(user_id=user.pk, session_hash=user.get_session_auth_hash(), session_key=key)

    def due(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return now - self.checked >= REVALIDATE_INTERVAL_S

    async def still_valid(self) -> bool:
        """False once the user is gone, deactivated, or has a new password (the session hash changes), or
        once the session is: logged out (POST /logout/ deletes it), expired, or another user's."""
        self.checked = time.monotonic()
        user = await get_user_model()._default_manager.filter(pk=self.user_id).afirst()
        if user is None or not getattr(user, "is_active", True):
            return False
        if not constant_time_compare(user.get_session_auth_hash(), self.session_hash):
            return False
        return await session_is_for(self.session_key, self.user_id)


async def session_is_for(session_key: str | None, user_id: int) -> bool:
    """Whether the session store still holds `session_key`, logged in as `user_id`. A store whose
    sessions live in the cookie itself (signed_cookies) cannot tell a logged-out one; every other can."""
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return str(await store.aget(SESSION_KEY)) == str(user_id)
