"""How many chat sockets each user holds open in this process: past the cap a new one is refused.

Every open socket costs a Channels group membership and a task; a script opening thousands with one
login would starve other users. Open WebUI-like clients use one socket per open chat tab, so the cap is
generous. The count is per process (each replica has its own sockets to protect).
"""

from __future__ import annotations

import threading

from django.conf import settings

CLOSE_TOO_MANY_SOCKETS = 4429


class OpenSockets:
    """A runtime service: open chat sockets per user id."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = settings.MOONCAKE_CHAT_MAX_SOCKETS_PER_USER if limit is None else limit
        self._lock = threading.Lock()
        self._open: dict[int, int] = {}

    def claim(self, user_id: int) -> bool:
        """Count one more socket for the user; False (and nothing counted) when at the cap."""
        with self._lock:
            count = self._open.get(user_id, 0)
            if count >= self.limit:
                return False
            self._open[user_id] = count + 1
            return True

    def release(self, user_id: int) -> None:
        with self._lock:
            count = self._open.get(user_id, 0) - 1
            if count > 0:
                self._open[user_id] = count
            else:
                self._open.pop(user_id, None)

    def count(self, user_id: int) -> int:
        return self._open.get(user_id, 0)
