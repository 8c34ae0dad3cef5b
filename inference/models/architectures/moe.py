"""Mixture-of-experts families over the shared decoder: Mixtral, Qwen2-MoE, Qwen3-MoE and OLMoE.

They differ in where the experts sit and how the router's top-k is weighted:
- Mixtral: every layer sparse, top-k renormalised, routing weights kept in fp32; its checkpoint names the
  block `block_sparse_moe` and the experts' projections w1/w3/w2.
- Qwen2-MoE: Qwen2 attention (QKV bias), a sigmoid-gated shared expert beside the routed ones, and dense
  layers where `mlp_only_layers` or `decoder_sparse_step` say so.
- Qwen3-MoE: Qwen3 attention (per-head q/k norm), the same layer placement, no shared expert.
- OLMoE: RMSNorm over the whole q and k projections (not per head), optional clipping of q/k/v.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from inference.models.architectures.args import ModelArgs
from inference.models.architectures.decoder import DecoderAttention, DecoderForCausalLM, DecoderLayer
from inference.models.architectures.qwen import qwen2_args, qwen3_args
from inference.models.layers.moe.layer import MoEArgs, SparseMoE
from inference.models.layers.norms import RMSNorm
from inference.models.layers.rotary import apply_rotary


def _int(config: PretrainedConfig, *names: str) -> int:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return int(value)
    raise ValueError(f"config has none of {', '.join(names)}")


class MoEDecoderForCausalLM(DecoderForCausalLM):
    """A decoder whose feed-forward is a SparseMoE on the layers the config makes sparse."""

    plain_layers: ClassVar[bool] = False
    shared_expert: ClassVar[bool] = False
    always_renormalize: ClassVar[bool] = False
    weights_in_model_dtype: ClassVar[bool] = True

    def __init__(self, config: PretrainedConfig) -> None:
        self.moe = self.moe_args(config)
        self.sparse = self.sparse_layers(config)
        super().__init__(config)

    @classmethod
    def moe_args(cls, config: PretrainedConfig) -> MoEArgs:
        return MoEArgs(
            num_experts=_int(config, "num_local_experts", "num_experts"),
            top_k=_int(config, "num_experts_per_tok"),
            expert_intermediate=_int(config, "moe_intermediate_size", "intermediate_size"),
            renormalize=cls.always_renormalize or bool(getattr(config, "norm_topk_prob", False)),
            weights_in_model_dtype=cls.weights_in_model_dtype,
            shared_intermediate=_int(config, "shared_expert_intermediate_size") if cls.shared_expert else 0,
        )

    @classmethod
    def sparse_layers(cls, config: PretrainedConfig) -> set[int]:
        """Qwen-MoE's placement rule (a layer is dense if listed in mlp_only_layers or off the sparse step);
        configs without those keys make every layer sparse."""
        dense = {int(i) for i in getattr(config, "mlp_only_layers", None) or []}
        step = int(getattr(config, "decoder_sparse_step", 1) or 1)
        layers = int(config.num_hidden_layers)
        return {i for i in range(layers) if i not in dense and (i + 1) % step == 0}

    def cuda_graph_capturable(self, device: torch.device, dtype: torch.dtype) -> bool:
        return all(m.fused_ready(device, dtype) for m in self.modules() if isinstance(m, SparseMoE))

    def make_layer(self, index: int) -> nn.Module:
        attention = self.make_attention()
        if index not in self.sparse:
            return DecoderLayer(self.args, attention=attention)
        return DecoderLayer(self.args, attention=attention, mlp=SparseMoE(self.args.hidden_size, self.moe))

    def make_attention(self) -> DecoderAttention:
        return DecoderAttention(self.args)


class MixtralForCausalLM(MoEDecoderForCausalLM):
    always_renormalize = True
    weights_in_model_dtype = False
    checkpoint_renames = (
        (".block_sparse_moe.", ".mlp."),
        (".w1.", ".gate_proj."),
        (".w3.", ".up_proj."),
        (".w2.", ".down_proj."),
    )


class Qwen2MoeForCausalLM(MoEDecoderForCausalLM):
    shared_expert = True

    @classmethod
    def model_args(cls, config: PretrainedConfig) -> ModelArgs:
        return qwen2_args(config)


class Qwen3MoeForCausalLM(MoEDecoderForCausalLM):
    @classmethod
    def model_args(cls, config: PretrainedConfig) -> ModelArgs:
        return qwen3_args(config)


class OlmoeAttention(DecoderAttention):
    """Attention with RMSNorm over the whole q and k projections, then q/k/v clipped where configured."""

    def __init__(self, args: ModelArgs, clip_qkv: float | None) -> None:
        super().__init__(args)
        self.q_norm = RMSNorm(args.num_heads * args.head_dim, args.rms_norm_eps)
        self.k_norm = RMSNorm(args.num_kv_heads * args.head_dim, args.rms_norm_eps)
        self.clip_qkv = clip_qkv

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: Any) -> torch.Tensor:
        q_size, kv_size, _ = self.qkv_proj.split_sizes
        q, k, v = self.qkv_proj(x).split([q_size, kv_size, kv_size], dim=-1)
        assert self.q_norm is not None and self.k_norm is not None
        q, k = self.q_norm(q), self.k_norm(k)
        if self.clip_qkv is not None:
            q, k, v = (t.clamp(-self.clip_qkv, self.clip_qkv) for t in (q, k, v))
        heads = torch.cat((q, k), dim=-1).view(-1, self.num_heads + self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(heads, cos, sin).split([self.num_heads, self.num_kv_heads], dim=1)
        out = self.attn(q, k, v.reshape(-1, self.num_kv_heads, self.head_dim).contiguous(), meta)
        return self.o_proj(out.reshape(-1, self.num_heads * self.head_dim))


class OlmoeForCausalLM(MoEDecoderForCausalLM):
    def __init__(self, config: PretrainedConfig) -> None:
        clip = getattr(config, "clip_qkv", None)
        self.clip_qkv = float(clip) if clip is not None else None
        super().__init__(config)

    def make_attention(self) -> DecoderAttention:
        return OlmoeAttention(self.args, self.clip_qkv)
