"""Gemma 2 and Gemma 3 (text, Gemma3ForCausalLM) over the shared decoder.

Both differ from Llama in the same ways: the embedding is scaled by sqrt(hidden) (the scale rounded to the
model dtype first, as transformers does), RMSNorms store their weight as an offset from 1, each layer norms
before and after both attention and the feed-forward, the MLP is GeGLU (tanh-approximated gelu), the
attention scale comes from query_pre_attn_scalar, and local (sliding-window) layers interleave with global
ones as the config's layer_types say. Gemma 2 soft-caps the attention logits and the final logits; Gemma 3
norms each query and key head, and rotates local layers with their own base (rope_parameters per layer type),
and applies no attention soft cap (transformers ignores the key there).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from inference.models.architectures.args import ModelArgs
from inference.models.architectures.decoder import (
    DecoderAttention,
    DecoderForCausalLM,
    DecoderLayer,
    PagedAttention,
)
from inference.models.layers.mlp import GatedMLP
from inference.models.layers.norms import OffsetRMSNorm
from inference.models.layers.rotary import RotaryEmbedding

GELU_TANH = "gelu_pytorch_tanh"


class GemmaAttention(DecoderAttention):
    def __init__(self, args: ModelArgs, *, scale: float, softcap: float | None) -> None:
        super().__init__(args)
        if args.qk_norm:
            self.q_norm = OffsetRMSNorm(args.head_dim, args.rms_norm_eps)
            self.k_norm = OffsetRMSNorm(args.head_dim, args.rms_norm_eps)
        self.attn = PagedAttention(scale, softcap=softcap)


class GemmaDecoderLayer(DecoderLayer):
    """Norms around both halves: h + post(attn(pre(h))), then h + post_ff(mlp(pre_ff(h)))."""

    def __init__(self, args: ModelArgs, attention: GemmaAttention) -> None:
        mlp = GatedMLP(args.hidden_size, args.intermediate_size, bias=False, activation=args.activation)
        super().__init__(args, attention=attention, mlp=mlp)
        hidden, eps = args.hidden_size, args.rms_norm_eps
        self.input_layernorm = OffsetRMSNorm(hidden, eps)
        self.post_attention_layernorm = OffsetRMSNorm(hidden, eps)
        self.pre_feedforward_layernorm = OffsetRMSNorm(hidden, eps)
        self.post_feedforward_layernorm = OffsetRMSNorm(hidden, eps)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: Any) -> torch.Tensor:
        h = h + self.post_attention_layernorm(self.self_attn(self.input_layernorm(h), cos, sin, meta))
        return h + self.post_feedforward_layernorm(self.mlp(self.pre_feedforward_layernorm(h)))


def _layer_type_rope(config: PretrainedConfig, layer_type: str) -> dict[str, Any] | None:
    """transformers 5 keys Gemma 3's rope parameters by layer type; None where the config does not."""
    params = getattr(config, "rope_parameters", None) or {}
    if not isinstance(params.get(layer_type), dict):
        return None
    rope = dict(params[layer_type])
    rope["rope_type"] = rope.get("rope_type") or rope.get("type") or "default"
    if float(rope.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial rotary embeddings are not supported")
    rope.setdefault("original_max_position_embeddings", config.max_position_embeddings)
    rope.setdefault("max_position_embeddings", config.max_position_embeddings)
    return rope


class Gemma2ForCausalLM(DecoderForCausalLM):
    plain_layers: ClassVar[bool] = False
    qk_norm: ClassVar[bool] = False
    attention_softcap: ClassVar[bool] = True

    def __init__(self, config: PretrainedConfig) -> None:
        if getattr(config, "use_bidirectional_attention", False):
            raise ValueError("bidirectional Gemma (an embedding model) is not a causal LM")
        self.query_scale = float(config.query_pre_attn_scalar) ** -0.5
        cap = getattr(config, "attn_logit_softcapping", None) if self.attention_softcap else None
        self.attention_cap = float(cap) if cap is not None else None
        final = getattr(config, "final_logit_softcapping", None)
        self.final_cap = float(final) if final is not None else None
        types = list(getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers)
        super().__init__(config)
        self.model.norm = OffsetRMSNorm(self.args.hidden_size, self.args.rms_norm_eps)
        # Local layers rotate with their own base where the config gives them one (Gemma 3).
        local_rope = _layer_type_rope(config, "sliding_attention")
        self.local_rotary = (
            RotaryEmbedding(self.args.head_dim, local_rope) if local_rope is not None else None
        )
        self.local_layers = [kind == "sliding_attention" for kind in types]

    @classmethod
    def model_args(cls, config: PretrainedConfig) -> ModelArgs:
        bias = bool(getattr(config, "attention_bias", False))
        args = ModelArgs.from_config(
            config, qkv_bias=bias, o_bias=bias, mlp_bias=False, qk_norm=cls.qk_norm, activations=(GELU_TANH,)
        )
        global_rope = _layer_type_rope(config, "full_attention")
        return args if global_rope is None else replace(args, rope=global_rope)

    def make_layer(self, index: int) -> nn.Module:
        attention = GemmaAttention(self.args, scale=self.query_scale, softcap=self.attention_cap)
        return GemmaDecoderLayer(self.args, attention)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: Any) -> torch.Tensor:
        h = self.model.embed_tokens(input_ids)
        # The scale rounded to the model dtype, then multiplied: the bits transformers gets.
        h = h * torch.tensor(self.args.hidden_size**0.5, dtype=torch.float32).to(h.dtype).item()
        global_cs = self.rotary.cos_sin(positions, h.dtype)
        local_cs = (
            self.local_rotary.cos_sin(positions, h.dtype) if self.local_rotary is not None else global_cs
        )
        for layer, local in zip(self.decoder_layers(), self.local_layers, strict=True):
            cos, sin = local_cs if local else global_cs
            h = layer(h, cos, sin, meta)
        return self.model.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = super().compute_logits(hidden)
        if self.final_cap is None:
            return logits
        return torch.tanh(logits / self.final_cap) * self.final_cap


class Gemma3ForCausalLM(Gemma2ForCausalLM):
    qk_norm = True
    attention_softcap = False
