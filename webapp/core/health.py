"""Readiness of the default engine, as /health reports it. Never claims ready unless the engine says so."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from inference.api import EngineError, ModelManagerClient
from webapp.core.engine import peek_manager

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    status: str  # ok | no_engine | no_model | loading | restarting | failed | dead
    reason: str | None = None
    model: str | None = None
    models: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": self.status, "model": self.model, "models": self.models}
        if self.reason is not None:
            body["reason"] = self.reason
        return body


def _model_states(manager: ModelManagerClient) -> list[dict[str, Any]]:
    return [{"name": info.name, "state": info.state, "error": info.error} for info in manager.list()]


def default_engine_readiness() -> Readiness:
    manager = peek_manager()
    if manager is None:
        return Readiness(False, "no_engine", "The engine has not been started yet.")
    models = _model_states(manager)
    default = manager.default_name
    try:
        engine = manager.peek(None)
    except EngineError as exc:
        state = next((m for m in models if m["name"] == default), None)
        if state is not None and state["state"] == "loading":
            return Readiness(False, "loading", f"Model {default} is loading.", default, models)
        if state is not None and state["state"] == "restarting":
            reason = f"Model {default} stopped unexpectedly and is restarting."
            return Readiness(False, "restarting", reason, default, models)
        if state is not None and state["state"] == "failed":
            return Readiness(
                False, "failed", f"Model {default} failed: {state['error']}", default, models
            )
        return Readiness(False, "no_model", str(exc) or "No model is loaded.", default, models)
    health = engine.health()
    # The manager's name is the one API clients use; engine.model_name is the model's source.
    name = default or str(engine.model_name)
    if health.state == "ready":
        return Readiness(True, "ok", None, name, models)
    if health.state == "loading":
        return Readiness(False, "loading", f"Model {name} is loading.", name, models)
    return Readiness(False, "dead", health.error or "The engine stopped.", name, models)
