"""Registered models: the database rows and the process's ModelManager kept in step."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from inference.api import (
    DTYPES,
    QUANTIZATION_ALIASES,
    QUANTIZATIONS,
    EngineConfig,
    ModelInfo,
    ModelManagerClient,
)
from webapp.core.engine_settings import engine_settings_get, memory_budget, resolve_registered_engine
from webapp.core.errors import Conflict
from webapp.core.model_list import find_listed
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.serving.engine import engine_config_dict
from webapp.serving.model_access import restrictions_changed
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

DEFAULT_FIELDS = (
    "max_model_len",
    "dtype",
    "quantization",
    "sampling_defaults",
    "system_prompt",
    "keep_alive_seconds",
)
ENGINE_DEFAULT_FIELDS = ("max_model_len", "dtype", "quantization", "keep_alive_seconds")


def engine_config_for(registration: ModelRegistration, tuning: EngineSettings | None = None) -> EngineConfig:
    """What a registration loads with (webapp.core.engine_settings layers it)."""
    return resolve_registered_engine(registration, tuning).config


def manager_options(registration: ModelRegistration) -> dict[str, Any]:
    """The manager's aliases and keep-alive for a registration (register and reconfigure take both)."""
    options: dict[str, Any] = {"aliases": list(registration.aliases)}
    if registration.keep_alive_seconds:
        options["keep_alive_seconds"] = float(registration.keep_alive_seconds)
    return options


def manager_register(
    manager: ModelManagerClient, registration: ModelRegistration, tuning: EngineSettings
) -> None:
    manager.register(
        registration.name, engine_config_for(registration, tuning), **manager_options(registration)
    )


def sync_manager() -> ModelManagerClient:
    """Make the manager and the table agree: register rows it lacks, record models it has and we lack.

    A write, so never on a GET: the server runs it once at start (console.startup) and every model action
    runs it first (cheap when nothing changed), which takes up rows other processes saved meanwhile.
    """
    manager = get_runtime().manager()
    tuning = engine_settings_get()
    manager.memory_budget_bytes = memory_budget(tuning)
    manager.evict_lru = tuning.evict_lru
    known = {info.name: info for info in manager.list()}
    rows = {row.name: row for row in ModelRegistration.objects.all()}
    if _rename_to_served_names(known, rows):
        rows = {row.name: row for row in ModelRegistration.objects.all()}
    _drop_unconfigured(known, rows)
    for name, row in rows.items():
        if name not in known:
            try:
                manager_register(manager, row, tuning)
            except ValueError as exc:
                _report_once(name, str(exc))
            else:
                _reported.pop(name, None)
    for name in _reported.keys() - rows.keys():  # deleted since: a new row of that name is reported anew
        del _reported[name]
    for name, info in known.items():
        if name not in rows:
            ModelRegistration.objects.get_or_create(
                name=name,
                defaults={
                    "aliases": list(info.aliases),
                    "source": str(info.source),
                    "builtin": True,
                    **builtin_engine_fields(name),
                },
            )
    return manager


# What registering each row last failed with, so that a lasting clash (a console model's alias that the
# yaml's model now has) is logged once rather than at every sync pass (every few seconds).
_reported: dict[str, str] = {}


def _report_once(name: str, problem: str) -> None:
    if _reported.get(name) != problem:
        _reported[name] = problem
        logger.error("%s is not served: %s; rename it or delete it on the models page", name, problem)


def _drop_unconfigured(known: dict[str, ModelInfo], rows: dict[str, ModelRegistration]) -> None:
    """Delete (from `rows` too) the records of yaml models that mooncake.yaml no longer lists: the yaml is
    their only registration, so such a row could only fail to register (its old alias, "default" say,
    now another model's) and offer a Load button for a model nobody serves."""
    for name, row in list(rows.items()):
        if row.builtin and name not in known and find_listed(settings.MOONCAKE, name) is None:
            logger.info("Dropping the console's record of %s: mooncake.yaml no longer lists it", name)
            ModelRegistration.objects.filter(pk=row.pk, builtin=True).delete()
            del rows[name]
            restrictions_changed()


def _rename_to_served_names(known: dict[str, ModelInfo], rows: dict[str, ModelRegistration]) -> bool:
    """Move a yaml model's record from a name that is now its alias (a hub id model used to be served
    under its short name) to the name it is served under, keeping the row and so its groups, defaults and
    state; a new record in its place would leave the model unrestricted. True when it tried any."""
    tried = False
    for name, info in known.items():
        old = next((rows[a] for a in info.aliases if a in rows and rows[a].builtin), None)
        if name in rows or old is None:
            continue
        tried = True
        try:
            with transaction.atomic():
                # Conditional, so that of two replicas starting together only one renames it.
                moved = ModelRegistration.objects.filter(pk=old.pk, name=old.name).update(
                    name=name, aliases=list(info.aliases)
                )
        except IntegrityError:  # another replica recorded the new name meanwhile
            moved = 0
        if moved:
            logger.info(
                "Renamed the console's record of %s to %s, the name it is served under now", old, name
            )
    if tried:
        restrictions_changed()
    return tried


def builtin_engine_fields(name: str) -> dict[str, Any]:
    """mooncake.yaml's dtype and quantization for a model it serves (its entry's, for a listed one), so
    that a later restart from the console (which applies the row's values) keeps them."""
    yaml = engine_config_dict(settings.MOONCAKE, find_listed(settings.MOONCAKE, name))
    fields: dict[str, Any] = {}
    if yaml.get("dtype") in DTYPES:
        fields["dtype"] = yaml["dtype"]
    quantization = str(yaml.get("quantization"))
    quantization = QUANTIZATION_ALIASES.get(quantization, quantization)
    if quantization in QUANTIZATIONS:
        fields["quantization"] = quantization
    return fields


def registration_create(
    *,
    name: str,
    source: str,
    aliases: list[str],
    keep_alive_seconds: int | None = None,
    task: str = "generate",
) -> ModelRegistration:
    """Record and register a model (the source is already confined to the allowed roots)."""
    manager = sync_manager()
    taken = {n for info in manager.list() for n in (info.name, *info.aliases)}
    clash = sorted(taken.intersection([name, *aliases]))
    if clash:
        raise Conflict(f"name or alias already in use: {', '.join(clash)}", code="name_taken")
    with transaction.atomic():
        row = ModelRegistration.objects.create(
            name=name, source=source, aliases=aliases, keep_alive_seconds=keep_alive_seconds, task=task
        )
        manager_register(manager, row, engine_settings_get())
    return row


def registration_delete(*, registration: ModelRegistration) -> None:
    manager = get_runtime().manager()
    if registration.name in {info.name for info in manager.list()}:
        manager.unregister(registration.name)
    registration.delete()


def registration_snapshot(registration: ModelRegistration) -> dict[str, Any]:
    return {"source": registration.source, "aliases": list(registration.aliases)} | {
        name: getattr(registration, name) for name in DEFAULT_FIELDS
    }


def registration_update_defaults(*, registration: ModelRegistration, values: dict[str, Any]) -> bool:
    """Save per-model defaults; True when the engine must restart (ENGINE_DEFAULT_FIELDS changed)."""
    before = registration_snapshot(registration)
    for name in DEFAULT_FIELDS:
        setattr(registration, name, values[name])
    registration.save()
    after = registration_snapshot(registration)
    return any(before[k] != after[k] for k in ENGINE_DEFAULT_FIELDS)
