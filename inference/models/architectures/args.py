"""Normalized hyperparameters read from a HF config, so the model code never touches config quirks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from transformers import PretrainedConfig


@dataclass(frozen=True, slots=True)
class ModelArgs:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: dict[str, Any]  # rope_type, rope_theta and the type's own parameters
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool
    activation: str = "silu"  # the gated MLP's: silu, or gelu_pytorch_tanh where the family allows it

    @classmethod
    def from_config(
        cls,
        config: PretrainedConfig,
        *,
        qkv_bias: bool,
        o_bias: bool,
        mlp_bias: bool,
        qk_norm: bool,
        activations: tuple[str, ...] = ("silu",),
    ) -> ModelArgs:
        """activations: those the family's MLP implements (Gemma names its own `hidden_activation`)."""
        act = getattr(config, "hidden_activation", None) or getattr(config, "hidden_act", "silu")
        if act not in activations:
            raise ValueError(f"unsupported hidden_act {act!r}; implemented here: {', '.join(activations)}")
        num_heads = int(config.num_attention_heads)
        num_kv_heads = int(getattr(config, "num_key_value_heads", None) or num_heads)
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_attention_heads={num_heads} is not a multiple of num_key_value_heads={num_kv_heads}"
            )
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // num_heads
        return cls(
            vocab_size=int(config.vocab_size),
            hidden_size=int(config.hidden_size),
            intermediate_size=int(config.intermediate_size),
            num_layers=int(config.num_hidden_layers),
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=int(head_dim),
            rms_norm_eps=float(config.rms_norm_eps),
            rope=rope_parameters(config),
            tie_word_embeddings=bool(getattr(config, "tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
            mlp_bias=mlp_bias,
            qk_norm=qk_norm,
            activation=str(act),
        )


def rope_parameters(config: PretrainedConfig) -> dict[str, Any]:
    """transformers 5 keeps everything in `rope_parameters`; 4.x split it into rope_theta + rope_scaling."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    if not params:
        params = dict(getattr(config, "rope_scaling", None) or {})
        params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    rope_type = params.get("rope_type") or params.get("type") or "default"
    params["rope_type"] = rope_type
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial rotary embeddings are not supported")
    max_positions = getattr(config, "max_position_embeddings", None)
    # Phi-3 keeps the pre-extension length beside max_position_embeddings (LongRoPE's switch point).
    original = getattr(config, "original_max_position_embeddings", None) or max_positions
    params.setdefault("original_max_position_embeddings", original)
    params.setdefault("max_position_embeddings", max_positions)
    return params
