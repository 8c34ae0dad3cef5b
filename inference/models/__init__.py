"""Our model implementations, keyed by the HF `architectures` name they load."""

from __future__ import annotations

from inference.models.decoder import DecoderForCausalLM
from inference.models.gemma import Gemma2ForCausalLM, Gemma3ForCausalLM
from inference.models.mistral import MistralForCausalLM
from inference.models.moe_models import (
    MixtralForCausalLM,
    OlmoeForCausalLM,
    Qwen2MoeForCausalLM,
    Qwen3MoeForCausalLM,
)
from inference.models.phi3 import Phi3ForCausalLM
from inference.models.qwen import Qwen2ForCausalLM, Qwen3ForCausalLM

MODEL_REGISTRY: dict[str, type[DecoderForCausalLM]] = {
    "LlamaForCausalLM": DecoderForCausalLM,
    "MistralForCausalLM": MistralForCausalLM,
    "Qwen2ForCausalLM": Qwen2ForCausalLM,
    "Qwen3ForCausalLM": Qwen3ForCausalLM,
    "MixtralForCausalLM": MixtralForCausalLM,
    "Qwen2MoeForCausalLM": Qwen2MoeForCausalLM,
    "Qwen3MoeForCausalLM": Qwen3MoeForCausalLM,
    "OlmoeForCausalLM": OlmoeForCausalLM,
    "Gemma2ForCausalLM": Gemma2ForCausalLM,
    "Gemma3ForCausalLM": Gemma3ForCausalLM,
    "Phi3ForCausalLM": Phi3ForCausalLM,
}
SUPPORTED_ARCHITECTURES = tuple(MODEL_REGISTRY)


def get_model_class(architecture: str) -> type[DecoderForCausalLM]:
    if architecture not in MODEL_REGISTRY:
        raise ValueError(
            f"unsupported architecture {architecture!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return MODEL_REGISTRY[architecture]


__all__ = ["MODEL_REGISTRY", "SUPPORTED_ARCHITECTURES", "DecoderForCausalLM", "get_model_class"]
