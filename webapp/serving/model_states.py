"""One vocabulary for a model's state, wherever a person reads it: the chat's header picker, its settings
panel, the user's default-model setting and the console.

The manager's states (inference.status.ModelState) are the API's and the health check's values and stay
as they are; people read four words instead: ready, loading, not loaded (it loads when a user picks it,
memory allowing: webapp.serving.on_demand) and unavailable, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ModelStatus(StrEnum):
    READY = "ready"
    LOADING = "loading"
    NOT_LOADED = "not loaded"
    UNAVAILABLE = "unavailable"


# The manager's states on the way to "loaded": a download, a load, a restart after the engine died.
LOADING_STATES = frozenset({"downloading", "loading", "restarting"})

# Pickers list what can answer now first, then what is on its way, then what loads when picked.
_RANK = {ModelStatus.READY: 0, ModelStatus.LOADING: 1, ModelStatus.NOT_LOADED: 2, ModelStatus.UNAVAILABLE: 3}


@dataclass(frozen=True, slots=True)
class StateView:
    status: ModelStatus
    label: str  # what the person reads, e.g. "not loaded (loads when picked)"

    @property
    def rank(self) -> int:
        return _RANK[self.status]


def describe(state: str, *, trouble: str | None = None) -> StateView:
    """How a model in manager state `state` reads; `trouble`: why a loaded model cannot serve now
    (webapp.serving.engine_trouble), which makes it unavailable."""
    if state == "loaded":
        if trouble:
            return StateView(ModelStatus.UNAVAILABLE, f"unavailable: {trouble}")
        return StateView(ModelStatus.READY, "ready")
    if state == "downloading":
        return StateView(ModelStatus.LOADING, "loading… (downloading)")
    if state in LOADING_STATES:
        return StateView(ModelStatus.LOADING, "loading…")
    if state == "available":
        return StateView(ModelStatus.NOT_LOADED, "not loaded (loads when picked)")
    if state == "unloading":
        return StateView(ModelStatus.UNAVAILABLE, "unavailable: being unloaded")
    if state == "failed":
        return StateView(ModelStatus.UNAVAILABLE, "unavailable: failed to load")
    return StateView(ModelStatus.UNAVAILABLE, f"unavailable: {state}")


def state_label(state: str, trouble: str | None = None) -> str:
    """describe(state).label, for templates (the `model_state` filter) and plain text."""
    return describe(state, trouble=trouble).label
