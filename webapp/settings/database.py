"""`DATABASE_URL` (postgres://user:pass@host:port/name) or SQLite under the data directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_POSTGRES_SCHEMES = {"postgres", "postgresql", "pgsql"}


def database_from_url(url: str, *, default_sqlite: Path) -> dict[str, Any]:
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(default_sqlite),
            # The engine process writes chat rows while Celery and the console read: wait rather than fail.
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
        }
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        name = unquote(parts.path[1:] if parts.path.startswith("//") else parts.path)
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name or str(default_sqlite)}
    if parts.scheme in _POSTGRES_SCHEMES:
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
            "CONN_MAX_AGE": 60,
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL scheme {parts.scheme!r} is not supported (use postgres:// or sqlite:)."
    )
