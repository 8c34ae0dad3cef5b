"""Readiness of the default engine, as /health reports it. Never claims ready unless the engine says so."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from inference.api import EngineError, ModelInfo
from webapp.core.request_id import error_reference
from webapp.core.runtime import get_runtime

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


# /health is public: load and crash errors (paths, CUDA messages) stay in the log and the staff console.
FAILED = "failed; the details are in the server log"


def _model_states(infos: list[ModelInfo]) -> list[dict[str, Any]]:
    return [{"name": i.name, "state": i.state, "error": FAILED if i.error else None} for i in infos]


def _hidden(what: str, detail: object) -> str:
    """A public sentence for `what` that quotes a reference; the details go to the log under it."""
    reference = error_reference()
    logger.warning("%s (reference %s): %s", what, reference, detail)
    return f"{what}; the details are in the server log (request id {reference})."


def default_engine_readiness() -> Readiness:
    manager = get_runtime().peek_manager()
    if manager is None:
        return Readiness(False, "no_engine", "The engine has not been started yet.")
    infos = manager.list()
    models = _model_states(infos)
    default = manager.default_name
    try:
        engine = manager.peek(None)
    except EngineError:
        state = next((m for m in models if m["name"] == default), None)
        if state is not None and state["state"] == "loading":
            return Readiness(False, "loading", f"Model {default} is loading.", default, models)
        if state is not None and state["state"] == "restarting":
            reason = f"Model {default} stopped unexpectedly and is restarting."
            return Readiness(False, "restarting", reason, default, models)
        if state is not None and state["state"] == "failed":
            error = next((i.error for i in infos if i.name == default), None)
            reason = _hidden(f"Model {default} failed to load", error)
            return Readiness(False, "failed", reason, default, models)
        return Readiness(False, "no_model", "No model is loaded.", default, models)
    health = engine.health()
    # The manager's name is the one API clients use; engine.model_name is the model's source.
    name = default or str(engine.model_name)
    if health.state == "ready":
        return Readiness(True, "ok", None, name, models)
    if health.state == "loading":
        return Readiness(False, "loading", f"Model {name} is loading.", name, models)
    return Readiness(False, "dead", _hidden(f"The engine of {name} stopped", health.error), name, models)
