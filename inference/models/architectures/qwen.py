"""Qwen2 (bias on Q/K/V) and Qwen3 (per-head RMSNorm on Q and K) as flag sets over the shared decoder."""

from __future__ import annotations

from transformers import PretrainedConfig

from inference.models.architectures.args import ModelArgs
from inference.models.architectures.decoder import DecoderForCausalLM


def qwen2_args(config: PretrainedConfig) -> ModelArgs:
    """Qwen2's attention (Q/K/V bias), shared with Qwen2-MoE."""
    return ModelArgs.from_config(config, qkv_bias=True, o_bias=False, mlp_bias=False, qk_norm=False)


def qwen3_args(config: PretrainedConfig) -> ModelArgs:
    """Qwen3's attention (per-head q/k norm), shared with Qwen3-MoE."""
    bias = bool(getattr(config, "attention_bias", False))
    return ModelArgs.from_config(config, qkv_bias=bias, o_bias=bias, mlp_bias=False, qk_norm=True)


class Qwen2ForCausalLM(DecoderForCausalLM):
    @classmethod
    def model_args(cls, config: PretrainedConfig) -> ModelArgs:
        return qwen2_args(config)


class Qwen3ForCausalLM(DecoderForCausalLM):
    @classmethod
    def model_args(cls, config: PretrainedConfig) -> ModelArgs:
        return qwen3_args(config)
