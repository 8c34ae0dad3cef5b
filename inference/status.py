"""What engines and the model manager report about themselves: plain, torch-free data (see inference.api)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EngineState = Literal["loading", "ready", "dead"]
# "downloading": the web layer is fetching the model's files (a hub id) before its engine starts.
ModelState = Literal["available", "downloading", "loading", "loaded", "unloading", "restarting", "failed"]


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
    task: str = "generate"  # what it serves: "generate" (chat, completions) or "embed" (embeddings)
    # While (and after a failed) download: bytes fetched so far, and in all (None: not known yet).
    download_bytes_done: int | None = None
    download_bytes_total: int | None = None
    # While loading: the step it is at (inference.progress) and, for a counting step, how far.
    load_phase: str | None = None
    load_done: int | None = None
    load_total: int | None = None
