"""Load, unload and restart models in background threads; the models table polls their state."""

from __future__ import annotations

from typing import Any

from webapp.console.engine_settings import engine_settings_get
from webapp.console.jobs import ProcessJob, process_jobs
from webapp.console.models import EngineSettings, ModelRegistration
from webapp.console.registry import manager_register, sync_manager


class ModelActionError(RuntimeError):
    """The model is unknown, or busy with another load, unload or restart."""


def _start(kind: str, name: str, work: Any) -> ProcessJob:
    if process_jobs.active_for(name) is not None:
        raise ModelActionError(f"{name} is busy with another job; wait for it to finish.")
    return process_jobs.start(kind, name, work)


def _require(name: str) -> Any:
    manager = sync_manager()
    if name not in {info.name for info in manager.list()}:
        raise ModelActionError(f"{name} is not a registered model.")
    return manager


def model_load(*, name: str) -> ProcessJob:
    manager = _require(name)

    def work() -> str:
        manager.load(name)
        return f"{name} loaded"

    return _start("load", name, work)


def model_unload(*, name: str) -> ProcessJob:
    manager = _require(name)
    drain = float(engine_settings_get().drain_timeout_seconds)

    def work() -> str:
        manager.unload(name, drain_timeout=drain)
        return f"{name} unloaded"

    return _start("unload", name, work)


def model_set_default(*, name: str) -> None:
    _require(name).set_default(name)


def _restart(manager: Any, registration: ModelRegistration, tuning: EngineSettings) -> str:
    name = registration.name
    info = next((i for i in manager.list() if i.name == name), None)
    was_loaded = info is not None and info.state == "loaded"
    was_default = manager.default_name == name
    if info is not None:
        if was_loaded:
            manager.unload(name, drain_timeout=float(tuning.drain_timeout_seconds))
        manager.unregister(name)
    manager_register(manager, registration, tuning)
    if was_default:
        manager.set_default(name)
    if was_loaded:
        manager.load(name)
    return f"{name} restarted" if was_loaded else f"{name} re-registered"


def model_restart(*, registration: ModelRegistration) -> ProcessJob:
    """Re-register with the current settings; a loaded model drains, reloads, and stays the default.

    Running and queued requests get `drain_timeout_seconds` to finish; the engine aborts whatever is left
    (its queue does not survive a shutdown), and requests arriving meanwhile get a 503 with Retry-After.
    """
    manager = sync_manager()
    tuning = engine_settings_get()
    return _start("restart", registration.name, lambda: _restart(manager, registration, tuning))


def restart_all() -> ProcessJob:
    """Restart every registered model one after another (after a tuning change); loaded ones drain first."""
    manager = sync_manager()
    tuning = engine_settings_get()
    rows = list(ModelRegistration.objects.all())

    def work() -> str:
        return "; ".join(_restart(manager, row, tuning) for row in rows) or "no models"

    return _start("restart", "engine", work)
