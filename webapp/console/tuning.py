"""Writes to the engine settings; the caller restarts the engines when an engine field changed."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from webapp.console.audit import audit_record
from webapp.core.engine_settings import (
    ENGINE_FIELDS,
    TUNING_FIELDS,
    engine_settings_get,
    engine_settings_snapshot,
)
from webapp.core.models import EngineSettings


def engine_settings_update(
    *, actor: AbstractBaseUser | AnonymousUser, values: dict[str, Any]
) -> tuple[EngineSettings, bool]:
    """Save the tuning fields and audit the change; True when the engines need a restart to apply it."""
    row = engine_settings_get()
    before = engine_settings_snapshot(row)
    for name in TUNING_FIELDS:
        setattr(row, name, values[name])
    row.save()
    after = engine_settings_snapshot(row)
    if before != after:
        audit_record(actor=actor, action="engine.tune", target="engine", before=before, after=after)
    return row, any(before[name] != after[name] for name in ENGINE_FIELDS)
