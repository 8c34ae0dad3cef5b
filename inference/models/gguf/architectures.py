"""Every GGUF architecture we read, one record each: its Hugging Face name, how llama.cpp's converter changed
its tensors (permuted Q/K rows, norms stored as 1 + w, names of its own), and the config settings to add
(configs.py). A new GGUF architecture is one record here."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from inference.models.gguf.configs import gemma_config, moe_config, olmoe_config, phi3_config
from inference.models.gguf.reader import GGUFFile


@dataclass(frozen=True, slots=True)
class GGUFArchitecture:
    """What one `general.architecture` needs beyond the Llama family's defaults."""

    hf_name: str  # the converted config's `architectures` entry (a llama file with experts is Mixtral)
    permuted_qk: bool = False  # llama.cpp's llama converter interleaves Q/K rows into its rotary layout
    offset_norms: bool = False  # RMSNorm weights stored as the multiplier 1 + w; Hugging Face keeps w
    layer_names: Mapping[str, str] = field(default_factory=dict)  # layer tensors named otherwise
    # The settings transformers' GGUF config reader leaves out or gets wrong (after the expert settings).
    fix_config: Callable[[GGUFFile, Any], Any] | None = None
    # The whole config, for an architecture that reader does not know.
    own_config: Callable[[GGUFFile], Any] | None = None

    def config(self, gguf: GGUFFile, read: Any) -> Any:
        """transformers' reading of the file (`read`) with what it leaves out added."""
        config = moe_config(gguf, read)
        return self.fix_config(gguf, config) if self.fix_config is not None else config


_GEMMA_NORMS = {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",  # Gemma's pre-feed-forward norm, not Llama's post-attention one
    "post_ffw_norm": "post_feedforward_layernorm",
}
# Fused in the file as in Phi-3's own checkpoints: [q; k; v] rows and [gate; up] rows.
_PHI3_NAMES = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}

ARCHITECTURES: dict[str, GGUFArchitecture] = {
    "llama": GGUFArchitecture("LlamaForCausalLM", permuted_qk=True),
    "qwen2": GGUFArchitecture("Qwen2ForCausalLM"),
    "qwen3": GGUFArchitecture("Qwen3ForCausalLM"),
    "qwen2moe": GGUFArchitecture("Qwen2MoeForCausalLM"),
    "qwen3moe": GGUFArchitecture("Qwen3MoeForCausalLM"),
    "olmoe": GGUFArchitecture("OlmoeForCausalLM", own_config=olmoe_config),
    "gemma2": GGUFArchitecture(
        "Gemma2ForCausalLM", offset_norms=True, layer_names=_GEMMA_NORMS, fix_config=gemma_config
    ),
    "gemma3": GGUFArchitecture(
        "Gemma3ForCausalLM", offset_norms=True, layer_names=_GEMMA_NORMS, fix_config=gemma_config
    ),
    "phi3": GGUFArchitecture("Phi3ForCausalLM", layer_names=_PHI3_NAMES, fix_config=phi3_config),
}
# GGUF `general.architecture` -> the HF `architectures` entry of the converted config.
GGUF_ARCHITECTURES = {name: record.hf_name for name, record in ARCHITECTURES.items()}
_PLAIN = GGUFArchitecture("?")


def architecture(name: str) -> GGUFArchitecture:
    """`name`'s record; an unknown one reads as the Llama family (the converter refuses it first)."""
    return ARCHITECTURES.get(name, _PLAIN)
