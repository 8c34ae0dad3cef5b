"""`make run` / `mooncake serve` on one machine: SQLite, in-memory channel layer, filesystem Celery broker."""

from __future__ import annotations

import secrets

from webapp.core.config import resolve_settings
from webapp.settings.base import *  # noqa: F403
from webapp.settings.base import ALLOWED_HOSTS, DATA_DIR, SECRET_KEY
from webapp.settings.env import env_bool

DEBUG = env_bool("DEBUG", True)
ALLOWED_HOSTS = ALLOWED_HOSTS or ["127.0.0.1", "localhost", "[::1]"]
# One machine, one user: the API is open unless MOONCAKE_API_AUTH says otherwise.
MOONCAKE_SETTINGS = resolve_settings(defaults={"api_auth": "off"})
MOONCAKE_API_AUTH = MOONCAKE_SETTINGS.server.api_auth


def _persistent_secret_key() -> str:
    """A random key generated once per data directory, so sessions survive restarts."""
    path = DATA_DIR / "secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50), encoding="utf-8")
        path.chmod(0o600)
    return path.read_text(encoding="utf-8").strip()


SECRET_KEY = SECRET_KEY or _persistent_secret_key()
