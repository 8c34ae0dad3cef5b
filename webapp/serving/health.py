"""Readiness of the default engine, as /health reports it. Never claims ready unless the engine says so."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference.api import EngineError, ModelInfo
from webapp.serving.runtime import get_runtime


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    status: str  # ok | no_engine | no_model | downloading | loading | restarting | failed | dead
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
    return [_model_state(i) for i in infos]


def _model_state(info: ModelInfo) -> dict[str, Any]:
    state: dict[str, Any] = {"name": info.name, "state": info.state, "error": FAILED if info.error else None}
    if info.download_bytes_done is not None:
        state["download"] = download_progress(info)
    return state


def download_progress(info: ModelInfo) -> dict[str, int | None]:
    """Bytes of a hub model fetched so far, and in all (None: not known yet)."""
    return {"bytes_done": info.download_bytes_done, "bytes_total": info.download_bytes_total}


def _hidden(what: str, detail: object) -> str:
    """A public sentence for `what` that quotes a reference; the details go to the log under it (once:
    every poll about the same failure quotes the same reference)."""
    reference = get_runtime().health_log.failure(what, detail)
    return f"{what}; the details are in the server log (request id {reference})."


def default_engine_readiness() -> Readiness:
    readiness = _readiness()
    get_runtime().health_log.state(readiness.status, None if readiness.ready else readiness.reason)
    return readiness


def _readiness() -> Readiness:
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
        if state is not None and state["state"] == "downloading":
            progress = state.get("download") or {}
            done, total = progress.get("bytes_done") or 0, progress.get("bytes_total")
            of = f" of {total / 1e6:.1f}" if total else ""
            reason = f"Model {default} is downloading ({done / 1e6:.1f}{of} MB)."
            return Readiness(False, "downloading", reason, default, models)
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
