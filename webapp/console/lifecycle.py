"""Load, unload and restart models in background threads; the models table polls their state.

`model_*` are the console's actions: saved for every replica (console.replication), applied here at once.
`apply_*` act on this process only; the sync applies other replicas' actions through them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Case, F, Value, When

from webapp.console import registry
from webapp.console.registry import engine_config_for, manager_options, manager_register, sync_manager
from webapp.console.replication import ModelSync, announce, config_key, model_sync
from webapp.core.engine_settings import drain_timeout, engine_settings_get
from webapp.core.errors import Conflict, InvalidRequest, NotFound
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.serving.jobs import ProcessJob
from webapp.serving.runtime import get_runtime


def _sync() -> ModelSync:
    return model_sync()


def _announce() -> None:
    announce(model_sync())


def _busy_check(name: str) -> None:
    if get_runtime().jobs.active_for(name) is not None:
        raise Conflict(f"{name} is busy with another job; wait for it to finish.", code="model_busy")


def _start(kind: str, name: str, work: Any) -> ProcessJob:
    _busy_check(name)
    return get_runtime().jobs.start(kind, name, work)


def _require(name: str) -> Any:
    manager = sync_manager()
    if name not in {info.name for info in manager.list()}:
        raise NotFound(f"{name} is not a registered model.", code="model_not_found")
    return manager


def _desire(name: str, state: str) -> None:
    """Save the admin's load or unload for every replica, and count it applied here (done below)."""
    rows = ModelRegistration.objects.filter(name=name)
    rows.update(desired_state=state, state_revision=F("state_revision") + 1)
    revision = rows.values_list("state_revision", flat=True).first()
    if revision is not None:
        _sync().mark_applied(name, revision)


def _act(name: str, desired: str, apply: Callable[..., ProcessJob]) -> ProcessJob:
    """Check, save for every replica, apply here, announce: an admin's load or unload."""
    _require(name)
    _busy_check(name)
    _desire(name, desired)
    job = apply(name=name)
    _announce()
    return job


def model_load(*, name: str) -> ProcessJob:
    return _act(name, ModelRegistration.Desired.LOADED, apply_load)


def model_unload(*, name: str) -> ProcessJob:
    return _act(name, ModelRegistration.Desired.UNLOADED, apply_unload)


def apply_load(*, name: str) -> ProcessJob:
    manager = _require(name)

    def work() -> str:
        manager.load(name)
        return f"{name} loaded"

    return _start("load", name, work)


def apply_unload(*, name: str) -> ProcessJob:
    manager = _require(name)
    drain = drain_timeout()

    def work() -> str:
        manager.unload(name, drain_timeout=drain)
        return f"{name} unloaded"

    return _start("unload", name, work)


def model_set_default(*, name: str) -> None:
    """Make `name` the model chats and API calls without a model use: a chat model, never an embedding one."""
    manager = _require(name)
    info = next(i for i in manager.list() if i.name == name)
    if getattr(info, "task", "generate") == "embed":  # getattr: test doubles may lack it
        raise InvalidRequest(f"{name} is an embedding model: the default model must be able to chat.")
    manager.set_default(name)
    ModelRegistration.objects.update(is_default=Case(When(name=name, then=Value(True)), default=Value(False)))
    _announce()


def _restart(manager: Any, registration: ModelRegistration, tuning: EngineSettings) -> str:
    name = registration.name
    info = next((i for i in manager.list() if i.name == name), None)
    if info is None:
        manager_register(manager, registration, tuning)
        return f"{name} registered"
    was_loaded = info.state == "loaded"
    manager.reconfigure(
        name,
        engine_config_for(registration, tuning),
        drain_timeout=drain_timeout(tuning),
        **manager_options(registration),
    )
    return f"{name} restarted" if was_loaded else f"{name} re-registered"


def model_restart(*, registration: ModelRegistration) -> ProcessJob:
    """Apply the current settings; a loaded model restarts gracefully and stays the default.

    Running requests get the drain timeout to finish, then are aborted; queued requests that have not
    started are kept and run on the restarted engine. Requests arriving meanwhile get a 503 with Retry-After.
    Every other replica restarts it too, when its sync sees the settings changed.
    """
    job = apply_restart(registration=registration)
    _announce()
    return job


def apply_restart(*, registration: ModelRegistration) -> ProcessJob:
    manager = sync_manager()
    tuning = engine_settings_get()
    _busy_check(registration.name)
    _sync().remember(registration.name, config_key(registration, tuning))
    return _start("restart", registration.name, lambda: _restart(manager, registration, tuning))


def restart_all() -> ProcessJob:
    """Restart every registered model one after another (after a tuning change); queued requests are kept."""
    manager = sync_manager()
    tuning = engine_settings_get()
    rows = list(ModelRegistration.objects.all())
    _busy_check("engine")
    for row in rows:
        _sync().remember(row.name, config_key(row, tuning))

    def work() -> str:
        return "; ".join(_restart(manager, row, tuning) for row in rows) or "no models"

    job = _start("restart", "engine", work)
    _announce()
    return job


def model_register(
    *,
    name: str,
    source: str,
    aliases: list[str],
    keep_alive_seconds: int | None = None,
    task: str = "generate",
) -> ModelRegistration:
    """Register a model on every replica."""
    row = registry.registration_create(
        name=name, source=source, aliases=aliases, keep_alive_seconds=keep_alive_seconds, task=task
    )
    _announce()
    return row


def model_unregister(*, registration: ModelRegistration) -> None:
    """Unregister a model on every replica (each unloads it first)."""
    registry.registration_delete(registration=registration)
    _announce()
