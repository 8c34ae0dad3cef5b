"""What /health has logged. Probes and load balancers poll it every few seconds: the log gets each change
of state once, and a failure's details once, under one reference every answer about it quotes."""

from __future__ import annotations

import logging
import threading

from webapp.core.request_id import error_reference

logger = logging.getLogger("webapp.serving.health")


class HealthLog:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._status: str | None = None
        self._failure: tuple[str, str] | None = None
        self._reference = ""

    def state(self, status: str, reason: str | None) -> None:
        """Log the readiness when it differs from the last one logged."""
        with self._lock:
            if status == self._status:
                return
            self._status = status
        logger.info("health: %s%s", status, f" ({reason})" if reason else "")

    def failure(self, what: str, detail: object) -> str:
        """The reference `what` is logged under with its details, logged the first time it is asked for."""
        key = (what, str(detail))
        with self._lock:
            if key == self._failure:
                return self._reference
            self._failure, self._reference = key, error_reference()
            reference = self._reference
        logger.warning("%s (reference %s): %s", what, reference, detail)
        return reference
