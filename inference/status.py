"""What engines and the model manager report about themselves: plain, torch-free data (see inference.api)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EngineState = Literal["loading", "ready", "dead"]
ModelState = Literal["available", "loading", "loaded", "unloading", "restarting", "failed"]


@dataclass(slots=True)
class EngineHealth:
    state: EngineState
    error: str | None = None


@dataclass(slots=True)
class ModelInfo:
    name: str
    aliases: list[str]
    source: str
    state: ModelState = "available"
    error: str | None = None
    architecture: str | None = None
    num_params: int | None = None
    dtype: str | None = None
    size_on_disk: int | None = None
    memory_bytes: int | None = None
    kv_capacity_tokens: int | None = None
    requests_served: int = 0
    restarts: int = 0  # automatic restarts after the engine died
    last_used: float | None = None
    keep_alive_seconds: float | None = None
    is_default: bool = False
