"""Celery tasks of the core app."""

from __future__ import annotations

import os
import socket

from celery import shared_task


@shared_task(name="core.ping")
def ping() -> dict[str, str | int]:
    """Which process ran this: proves a real worker is consuming the queue."""
    return {"pid": os.getpid(), "host": socket.gethostname()}
