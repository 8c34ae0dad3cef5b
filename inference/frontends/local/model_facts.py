"""What the model manager and the console show about a loaded engine: its model's details and footprint."""

from __future__ import annotations

from typing import Any

from inference.core.engine import LLMEngine
from inference.models.architectures.decoder import DecoderForCausalLM


def memory_bytes(engine: LLMEngine) -> int:
    """Weights plus KV cache, the figure the manager's memory budget counts."""
    model = engine.loaded.model
    weights = (
        model.weight_bytes()
        if isinstance(model, DecoderForCausalLM)
        else sum(p.numel() * p.element_size() for p in model.parameters())
    )
    return int(weights + getattr(engine.runner, "kv_cache_bytes", 0))


def model_details(engine: LLMEngine) -> dict[str, Any]:
    """architecture, num_params, dtype and size_on_disk, as ModelInfo shows them."""
    loaded = engine.loaded
    return {
        "architecture": loaded.architecture,
        "num_params": loaded.num_params,
        "dtype": str(loaded.dtype).removeprefix("torch."),
        "size_on_disk": loaded.size_on_disk,
    }
