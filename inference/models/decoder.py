"""The Llama-family decoder (Llama 2/3, SmolLM2, Mistral dense, Qwen2, Qwen3) over a paged KV cache.

The variants differ only in flags from ModelArgs: QKV bias (Qwen2), per-head q/k RMSNorm (Qwen3).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig

from inference.attention.base import AttentionBackend
from inference.kv_cache import KVCacheSpec
from inference.models import q4_decode
from inference.models.args import ModelArgs
from inference.models.int4 import Q4Blocks
from inference.models.layers import GatedMLP, Linear, QKVLinear, RMSNorm
from inference.models.onednn import pack_weight, packed_linear
from inference.models.rotary import RotaryEmbedding, apply_rotary


class PagedAttention(nn.Module):
    """Holds one layer's cache and delegates to the backend the runner binds."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale
        self.backend: AttentionBackend | None = None
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: Any) -> torch.Tensor:
        if self.backend is None:
            raise RuntimeError("no KV cache bound: call bind_kv_cache() before running the model")
        return self.backend.forward(q, k, v, self.k_cache, self.v_cache, meta, self.scale)


class DecoderAttention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_heads, args.num_kv_heads, args.head_dim
        self.qkv_proj = QKVLinear(
            args.hidden_size, args.head_dim, args.num_heads, args.num_kv_heads, bias=args.qkv_bias
        )
        self.o_proj = Linear(args.num_heads * args.head_dim, args.hidden_size, bias=args.o_bias)
        self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps) if args.qk_norm else None
        self.attn = PagedAttention(args.head_dim**-0.5)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: Any) -> torch.Tensor:
        qkv = self.qkv_proj(x)
        q_size, kv_size = self.qkv_proj.split_sizes[:2]
        v = qkv[:, q_size + kv_size :].view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q = self.q_norm(qkv[:, :q_size].view(-1, self.num_heads, self.head_dim))
            k = self.k_norm(qkv[:, q_size : q_size + kv_size].view(-1, self.num_kv_heads, self.head_dim))
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        else:
            # Q and K heads side by side get one rotary pass instead of two: the same element-wise ops, so
            # the same bits, at half the per-op overhead that dominates small decode batches.
            heads = qkv[:, : q_size + kv_size].view(-1, self.num_heads + self.num_kv_heads, self.head_dim)
            q, k = apply_rotary(heads, cos, sin).split([self.num_heads, self.num_kv_heads], dim=1)
        out = self.attn(q, k, v.contiguous(), meta)
        return self.o_proj(out.reshape(-1, self.num_heads * self.head_dim))


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = DecoderAttention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = GatedMLP(args.hidden_size, args.intermediate_size, bias=args.mlp_bias)

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: Any) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderModel(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args) for _ in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)


class DecoderForCausalLM(nn.Module):
    """Flat ragged batch in (token ids + positions + attention metadata), hidden states out."""

    # (fused module attribute, checkpoint module name, shard) — checkpoint tensors stacked into fused params.
    stacked_params: ClassVar[list[tuple[str, str, str]]] = [
        ("qkv_proj", "q_proj", "q"),
        ("qkv_proj", "k_proj", "k"),
        ("qkv_proj", "v_proj", "v"),
        ("gate_up_proj", "gate_proj", "gate"),
        ("gate_up_proj", "up_proj", "up"),
    ]

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.args = self.model_args(config)
        self.model = DecoderModel(self.args)
        self.rotary = RotaryEmbedding(self.args.head_dim, self.args.rope)
        self.lm_head = (
            None
            if self.args.tie_word_embeddings
            else Linear(self.args.hidden_size, self.args.vocab_size, bias=False)
        )
        self._packed_head: torch.Tensor | None = None
        self._head_decode: q4_decode.DecodeWeight | None = None

    @classmethod
    def model_args(cls, config: PretrainedConfig) -> ModelArgs:
        bias = bool(getattr(config, "attention_bias", False))
        return ModelArgs.from_config(
            config,
            qkv_bias=bias,
            o_bias=bias,
            mlp_bias=bool(getattr(config, "mlp_bias", False)),
            qk_norm=False,
        )

    @classmethod
    def context_length(cls, config: PretrainedConfig) -> int:
        length = int(getattr(config, "max_position_embeddings", 2048))
        # We attend over the whole context: a sliding-window model (Mistral v0.1) is exact only in its window.
        window = getattr(config, "sliding_window", None)
        if window and (getattr(config, "use_sliding_window", True) is not False):
            length = min(length, int(window))
        return length

    def kv_cache_spec(self, dtype: torch.dtype) -> KVCacheSpec:
        return KVCacheSpec(self.args.num_layers, self.args.num_kv_heads, self.args.head_dim, dtype)

    def bind_kv_cache(
        self, backend: AttentionBackend, caches: list[tuple[torch.Tensor, torch.Tensor]]
    ) -> None:
        if len(caches) != self.args.num_layers:
            raise ValueError(f"expected {self.args.num_layers} layer caches, got {len(caches)}")
        for layer, (k_cache, v_cache) in zip(self.decoder_layers(), caches, strict=True):
            attn = layer.self_attn.attn
            attn.backend, attn.k_cache, attn.v_cache = backend, k_cache, v_cache

    def decoder_layers(self) -> list[DecoderLayer]:
        return [layer for layer in self.model.layers if isinstance(layer, DecoderLayer)]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: Any) -> torch.Tensor:
        h = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, h.dtype)
        for layer in self.decoder_layers():
            h = layer(h, cos, sin, meta)
        return self.model.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        head = self._head_decode
        if head is not None and hidden.numel() <= q4_decode.max_rows() * hidden.shape[-1]:
            return q4_decode.q4_linear(hidden, head, None)
        if self._packed_head is not None:
            return packed_linear(hidden, self._packed_head, None)
        if self.lm_head is not None:
            return self.lm_head(hidden)
        return F.linear(hidden, self.model.embed_tokens.weight)

    def weight_bytes(self) -> int:
        """Memory the weights take, prepacked copies included (those are plain attributes, not parameters)."""
        linears = [m for m in self.modules() if isinstance(m, Linear)]
        tensors = [*self.parameters(), *(m.packed_weight for m in linears), self._packed_head]
        int4 = sum(m.int4_weight.nbytes() for m in linears if m.int4_weight is not None)
        int4 += sum(m.q4_decode.nbytes() for m in linears if m.q4_decode is not None)
        int4 += self._head_decode.nbytes() if self._head_decode is not None else 0
        return int4 + sum(t.numel() * t.element_size() for t in tensors if t is not None)

    def use_int4(self, blocks: dict[str, Q4Blocks]) -> int:
        """Give every projection whose checkpoint weights are in `blocks` its 4-bit weights; returns how
        many projections took them."""
        count = 0
        for module, stacked in self._projections_in(blocks):
            if module.int4_weight is None:
                module.use_int4(stacked)
                count += 1
        return count

    def use_q4_decode(self, blocks: dict[str, Q4Blocks]) -> int:
        """Let small batches read the blocks of every projection whose bf16 weight they reproduce bit for
        bit (call before packing, while the dense weights are still here); returns how many did."""
        count = 0
        for module, stacked in self._projections_in(blocks):
            if q4_decode.eligible(stacked) and q4_decode.matches(stacked, module.weight.detach()):
                module.q4_decode = q4_decode.decode_weight(stacked)
                count += 1
        return count

    def use_q8_head(self, blocks: q4_decode.Q8Blocks) -> bool:
        """Let small batches' logits read a tied head's Q8_0 blocks where they reproduce the embedding's bf16
        weights bit for bit; returns whether they do."""
        embedding = self.model.embed_tokens.weight.detach()
        exact = q4_decode.eligible(blocks) and q4_decode.matches(blocks, embedding)
        if self.lm_head is not None or not exact:
            return False
        self._head_decode = q4_decode.decode_weight(blocks)
        return True

    def _projections_in(self, blocks: dict[str, Q4Blocks]) -> Iterator[tuple[Linear, Q4Blocks]]:
        """Each projection whose checkpoint weights (all shards of a fused one) are in `blocks`, with them
        stacked in the fused order."""
        shards_of: dict[str, list[str]] = {}
        for fused, original, _ in self.stacked_params:
            shards_of.setdefault(fused, []).append(original)
        for name, module in self.named_modules():
            if not isinstance(module, Linear):
                continue
            parent, _, attr = name.rpartition(".")
            prefix = f"{parent}." if parent else ""
            sources = [f"{prefix}{original}.weight" for original in shards_of.get(attr, [attr])]
            if all(source in blocks for source in sources):
                yield module, Q4Blocks.stack([blocks[source] for source in sources])

    def pack_linears(self) -> None:
        """Prepack every projection and the LM head for oneDNN (call once, after the weights are loaded).

        A tied LM head keeps the dense embedding for token lookup and gets a packed copy of its own.
        """
        for module in self.modules():
            if isinstance(module, Linear) and module.packed_weight is None and module.int4_weight is None:
                module.pack()
        if self.lm_head is None and self._packed_head is None:
            self._packed_head = pack_weight(self.model.embed_tokens.weight)
