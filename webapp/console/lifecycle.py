"""Load, unload and restart models in background threads; the models table polls their state."""

from __future__ import annotations

from typing import Any

from webapp.console.registry import engine_config_for, manager_options, manager_register, sync_manager
from webapp.core.engine_settings import drain_timeout, engine_settings_get
from webapp.core.errors import Conflict, NotFound
from webapp.core.jobs import ProcessJob
from webapp.core.models import EngineSettings, ModelRegistration
from webapp.core.runtime import get_runtime


def _start(kind: str, name: str, work: Any) -> ProcessJob:
    if get_runtime().jobs.active_for(name) is not None:
        raise Conflict(f"{name} is busy with another job; wait for it to finish.", code="model_busy")
    return get_runtime().jobs.start(kind, name, work)


def _require(name: str) -> Any:
    manager = sync_manager()
    if name not in {info.name for info in manager.list()}:
        raise NotFound(f"{name} is not a registered model.", code="model_not_found")
    return manager


def model_load(*, name: str) -> ProcessJob:
    manager = _require(name)

    def work() -> str:
        manager.load(name)
        return f"{name} loaded"

    return _start("load", name, work)


def model_unload(*, name: str) -> ProcessJob:
    manager = _require(name)
    drain = drain_timeout()

    def work() -> str:
        manager.unload(name, drain_timeout=drain)
        return f"{name} unloaded"

    return _start("unload", name, work)


def model_set_default(*, name: str) -> None:
    _require(name).set_default(name)


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
    """
    manager = sync_manager()
    tuning = engine_settings_get()
    return _start("restart", registration.name, lambda: _restart(manager, registration, tuning))


def restart_all() -> ProcessJob:
    """Restart every registered model one after another (after a tuning change); queued requests are kept."""
    manager = sync_manager()
    tuning = engine_settings_get()
    rows = list(ModelRegistration.objects.all())

    def work() -> str:
        return "; ".join(_restart(manager, row, tuning) for row in rows) or "no models"

    return _start("restart", "engine", work)
