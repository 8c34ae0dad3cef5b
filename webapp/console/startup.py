"""Register the console's saved models into the server's manager on the first request it serves.

Daphne has no lifespan hook and the ASGI module belongs to the foundation, so the first request (usually a
health probe) is the earliest moment with settings, database and manager all ready. Only servers that
autoload a model do this; tests and management commands never build a manager as a side effect.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.conf import settings
from django.core.signals import request_started

logger = logging.getLogger(__name__)

_done = threading.Event()
_lock = threading.Lock()


def _sync_once(**_kwargs: Any) -> None:
    if _done.is_set():
        return
    with _lock:
        if _done.is_set():
            return
        _done.set()
        request_started.disconnect(_sync_once, dispatch_uid="console-startup-sync")
        try:
            from webapp.console.registry import sync_manager

            sync_manager()
        except Exception:
            logger.exception(
                "Registering the console's saved models failed; the next model action retries"
            )


def connect_startup_sync() -> None:
    if getattr(settings, "MOONCAKE_AUTOLOAD", False):
        request_started.connect(_sync_once, dispatch_uid="console-startup-sync")
