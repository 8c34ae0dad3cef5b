"""LOGGING: one line per record on stderr, plain or JSON, each carrying its request's id."""

from __future__ import annotations

from typing import Any


def logging_config(*, log_format: str, level: str) -> dict[str, Any]:
    """`log_format` "json": one JSON object per line, for log shippers; anything else is plain text."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            # Every line carries the id of the request it was written for ("-" outside requests).
            "request_id": {"()": "webapp.core.request_id.RequestIdFilter"},
            # An expected refusal (a 403 from PermissionDenied) is one line, not a traceback.
            "refusals": {"()": "webapp.core.log_filters.RefusalsOnOneLine"},
        },
        "formatters": {
            "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"},
            "json": {"()": "webapp.core.request_id.JsonFormatter"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "json" if log_format.lower() == "json" else "plain",
                "filters": ["request_id"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            "django.channels.server": {"level": "WARNING"},
            "django.request": {"filters": ["refusals"]},
        },
    }
