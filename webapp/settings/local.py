"""`make run` / `mooncake serve` on one machine: SQLite, in-memory channel layer, filesystem Celery broker."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from webapp.core.config import LOCAL_DEFAULTS, resolve_settings
from webapp.settings.base import *  # noqa: F403
from webapp.settings.base import ALLOWED_HOSTS, DATA_DIR, SECRET_KEY
from webapp.settings.env import env_bool

DEBUG = env_bool("DEBUG", True)
ALLOWED_HOSTS = ALLOWED_HOSTS or ["127.0.0.1", "localhost", "[::1]"]
# One machine, one user: the API is open unless MOONCAKE_API_AUTH says otherwise.
MOONCAKE_SETTINGS = resolve_settings(defaults=LOCAL_DEFAULTS)
MOONCAKE_API_AUTH = MOONCAKE_SETTINGS.server.api_auth


def _persistent_secret_key(path: Path) -> str:
    """A random key generated once per data directory, so sessions survive restarts. Created 0600 in one
    step (never readable by others, not even for a moment); a process that loses the race to create it
    (the server and the worker start together) reads the winner's."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(secrets.token_urlsafe(50))
    deadline = time.monotonic() + 5.0
    while not (key := path.read_text(encoding="utf-8").strip()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the winner has created the file but not yet written it
    if not key:
        raise ImproperlyConfigured(f"{path} is empty; delete it to have a new secret key generated.")
    return key


SECRET_KEY = SECRET_KEY or _persistent_secret_key(DATA_DIR / "secret_key")
