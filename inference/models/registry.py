"""Our model implementations by the Hugging Face `architectures` name they load: a lazy table, so naming
what runs natively (the console, `mooncake check`, a GGUF's header) imports no torch or transformers; a
class is imported when a model of it is loaded."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from inference.models.architectures.decoder import DecoderForCausalLM

_ARCHITECTURES = "inference.models.architectures"
# architecture name -> (module under architectures/, class)
MODELS: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("decoder", "DecoderForCausalLM"),
    "MistralForCausalLM": ("mistral", "MistralForCausalLM"),
    "Qwen2ForCausalLM": ("qwen", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("qwen", "Qwen3ForCausalLM"),
    "MixtralForCausalLM": ("moe", "MixtralForCausalLM"),
    "Qwen2MoeForCausalLM": ("moe", "Qwen2MoeForCausalLM"),
    "Qwen3MoeForCausalLM": ("moe", "Qwen3MoeForCausalLM"),
    "OlmoeForCausalLM": ("moe", "OlmoeForCausalLM"),
    "Gemma2ForCausalLM": ("gemma", "Gemma2ForCausalLM"),
    "Gemma3ForCausalLM": ("gemma", "Gemma3ForCausalLM"),
    "Phi3ForCausalLM": ("phi3", "Phi3ForCausalLM"),
}
SUPPORTED_ARCHITECTURES = tuple(MODELS)


def get_model_class(architecture: str) -> type[DecoderForCausalLM]:
    if architecture not in MODELS:
        raise ValueError(
            f"unsupported architecture {architecture!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    module, name = MODELS[architecture]
    model_class: type[DecoderForCausalLM] = getattr(
        importlib.import_module(f"{_ARCHITECTURES}.{module}"), name
    )
    return model_class
