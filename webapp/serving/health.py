"""Readiness of the default engine, as /health reports it. Never claims ready unless the engine says so.

Every caller gets the overall state; the models, and the default model's name in the reason, only go to
callers who may see them (as_json): a restricted model's name is never shown to someone who may not use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inference.api import EngineError, ModelInfo
from webapp.serving.engine_trouble import UNAVAILABLE, engine_trouble, stopped_words
from webapp.serving.runtime import get_runtime

MaySee = Callable[[str], bool]


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    status: str  # ok | no_engine | no_model | downloading | loading | restarting | failed | dead
    reason: str | None = None  # names the default model; a failure's details stay in the log
    model: str | None = None
    models: list[dict[str, Any]] = field(default_factory=list)
    unnamed_reason: str | None = None  # the reason without the model's name
    detailed_reason: str | None = None  # the reason with the failure's details

    def as_json(self, may_see: MaySee | None) -> dict[str, Any]:
        """The body for a caller who may see the models `may_see` accepts; None: only the overall state."""
        body: dict[str, Any] = {"status": self.status}
        shown = may_see is not None and (self.model is None or may_see(self.model))
        reason = (self.detailed_reason or self.reason) if shown else (self.unnamed_reason or self.reason)
        if may_see is not None:
            body["model"] = self.model if shown else None
            body["models"] = [m for m in self.models if may_see(m["name"])]
        if reason is not None:
            body["reason"] = reason
        return body


def _model_states(infos: list[ModelInfo], manager: Any) -> list[dict[str, Any]]:
    return [_model_state(i, engine_trouble(manager, i)) for i in infos]


def _model_state(info: ModelInfo, trouble: str | None = None) -> dict[str, Any]:
    # The error as the console's Models page shows it: only callers who may see the model get this entry.
    state: dict[str, Any] = {"name": info.name, "state": info.state, "error": info.error}
    if trouble is not None:  # loaded, but its engine cannot serve now (an upstream down or refusing our key)
        state.update(state=UNAVAILABLE, error=trouble)
    if info.download_bytes_done is not None:
        state["download"] = download_progress(info)
    load = load_progress(info)
    if load is not None:
        state["load"] = load
    return state


def download_progress(info: ModelInfo) -> dict[str, int | None]:
    """Bytes of a hub model fetched so far, and in all (None: not known yet)."""
    return {"bytes_done": info.download_bytes_done, "bytes_total": info.download_bytes_total}


def load_progress(info: ModelInfo) -> dict[str, str | int | None] | None:
    """The step a loading model is at, as the console shows it ("loading weights", 12 of 30); None when
    it is not loading or has reported no step yet."""
    if info.state != "loading" or not info.load_phase:
        return None
    return {"step": info.load_phase, "done": info.load_done, "total": info.load_total}


def _about(status: str, name: str | None, models: list[dict[str, Any]], predicate: str) -> Readiness:
    """Not ready: the default model `predicate` ("is loading."), told with and without its name."""
    named, unnamed = f"Model {name} {predicate}", f"The default model {predicate}"
    return Readiness(False, status, named, name, models, unnamed_reason=unnamed)


def _failure(
    status: str, name: str | None, models: list[dict[str, Any]], what: tuple[str, str], detail: object
) -> Readiness:
    """`what` (named, unnamed) went wrong: the details are logged once, under the reference every answer
    about it quotes; callers who may see the model get them too."""
    named, unnamed = what
    reference = get_runtime().health_log.failure(named, detail)
    where = f"the details are in the server log (request id {reference})."
    detailed = f"{named}: {detail} (request id {reference})." if detail else None
    return Readiness(
        False, status, f"{named}; {where}", name, models, unnamed_reason=f"{unnamed}; {where}",
        detailed_reason=detailed,
    )  # fmt: skip


def default_engine_readiness() -> Readiness:
    readiness = _readiness()
    get_runtime().health_log.state(readiness.status, None if readiness.ready else readiness.reason)
    return readiness


def _readiness() -> Readiness:
    manager = get_runtime().peek_manager()
    if manager is None:
        return Readiness(False, "no_engine", "The engine has not been started yet.")
    infos = manager.list()
    models = _model_states(infos, manager)
    default = manager.default_name
    try:
        engine = manager.peek(None)
    except EngineError:
        info = next((i for i in infos if i.name == default), None)
        state = info.state if info is not None else None
        if info is not None and state == "downloading":
            done, total = info.download_bytes_done or 0, info.download_bytes_total
            of = f" of {total / 1e6:.1f}" if total else ""
            return _about("downloading", default, models, f"is downloading ({done / 1e6:.1f}{of} MB).")
        if state == "loading":
            return _about("loading", default, models, "is loading.")
        if state == "restarting":
            return _about("restarting", default, models, "stopped unexpectedly and is restarting.")
        if info is not None and state == "failed":
            what = (f"Model {default} failed to load", "The default model failed to load")
            return _failure("failed", default, models, what, info.error)
        return Readiness(False, "no_model", "No model is loaded.", default, models)
    health = engine.health()
    # The manager's name is the one API clients use; engine.model_name is the model's source.
    name = default or str(engine.model_name)
    if health.state == "ready":
        return Readiness(True, "ok", None, name, models)
    if health.state == "loading":
        return _about("loading", name, models, "is loading.")
    return _failure("dead", name, models, stopped_words(name, health.error), health.error)
