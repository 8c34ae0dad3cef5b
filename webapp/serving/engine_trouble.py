"""A loaded model whose engine cannot serve now: an `openai` engine's upstream that is down or refuses our
key. The manager keeps such a model `loaded` (nothing here needs reloading, and it recovers on its own when
the upstream does), so /health and the console's Models page show it as `unavailable`, in the engine's
own words, naming the upstream and, for a refused key, the setting to fix.
"""

from __future__ import annotations

from typing import Any

from inference.api import EngineError, ModelInfo

UNAVAILABLE = "unavailable"
# How inference.frontends.remote.health words its verdicts (EngineHealth.error).
UPSTREAM_AUTH = "upstream authentication failed"
UPSTREAM_DOWN = "upstream unavailable"


def engine_trouble(manager: Any, info: ModelInfo) -> str | None:
    """Why a loaded model's engine cannot serve now; None when it can, or when it is not loaded."""
    if info.state != "loaded":
        return None
    try:
        engine = manager.peek(info.name)
    except EngineError:
        return None
    health = engine.health()
    if health.state != "dead":
        return None
    return str(health.error or "the engine cannot serve")


def stopped_words(name: str, error: str | None) -> tuple[str, str]:
    """/health's reason for a default model whose engine cannot serve: with and without its name."""
    if error is not None and error.startswith(UPSTREAM_AUTH):
        what = "'s upstream refused our API key (engine.api_key_env)"
        return f"Model {name}{what}", f"The default model{what}"
    if error is not None and error.startswith(UPSTREAM_DOWN):
        return f"Model {name}'s upstream is unavailable", "The default model's upstream is unavailable"
    return f"The engine of {name} stopped", "The engine of the default model stopped"
