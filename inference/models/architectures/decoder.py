"""The Llama-family decoder (Llama 2/3, SmolLM2, Mistral dense, Qwen2, Qwen3) over a paged KV cache.

The variants differ only in flags from ModelArgs: QKV bias (Qwen2), per-head q/k RMSNorm (Qwen3). Sliding
windows come from the config for every family (sliding_windows) and are enforced in the attention.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import torch
from torch import nn
from transformers import PretrainedConfig

from inference.models.architectures.args import ModelArgs
from inference.models.layers.attention.base import AttentionBackend, sequence_lengths
from inference.models.layers.attention.kv_cache import KVCacheSpec
from inference.models.layers.embedding import TokenEmbedding
from inference.models.layers.linear import Linear, QKVLinear
from inference.models.layers.mlp import GatedMLP
from inference.models.layers.norms import RMSNorm
from inference.models.layers.rotary import RotaryEmbedding, apply_rotary
from inference.models.quantization.base import DENSE, LinearMethod


class PagedAttention(nn.Module):
    """Holds one layer's cache and delegates to the backend the runner binds."""

    def __init__(
        self, scale: float, *, sliding_window: int | None = None, softcap: float | None = None
    ) -> None:
        super().__init__()
        self.scale = scale
        self.sliding_window = sliding_window  # keys per row, the row's own included (transformers' window)
        self.softcap = softcap  # attention-logit soft cap (Gemma 2)
        self.backend: AttentionBackend | None = None
        self.k_cache = torch.empty(0)
        self.v_cache = torch.empty(0)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, meta: Any) -> torch.Tensor:
        if self.backend is None:
            raise RuntimeError("no KV cache bound: call bind_kv_cache() before running the model")
        return self.backend.forward(
            q,
            k,
            v,
            self.k_cache,
            self.v_cache,
            meta,
            self.scale,
            window=self.sliding_window,
            softcap=self.softcap,
        )


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
    def __init__(
        self, args: ModelArgs, *, attention: DecoderAttention | None = None, mlp: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = attention if attention is not None else DecoderAttention(args)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = (
            mlp if mlp is not None else GatedMLP(args.hidden_size, args.intermediate_size, bias=args.mlp_bias)
        )

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: Any) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class DecoderModel(nn.Module):
    def __init__(self, args: ModelArgs, make_layer: Callable[[int], nn.Module]) -> None:
        super().__init__()
        self.embed_tokens = TokenEmbedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(make_layer(index) for index in range(args.num_layers))
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
    # (checkpoint substring, ours) applied to every checkpoint name before loading: families that name the
    # same tensors differently (Mixtral's block_sparse_moe.experts.N.w1) map onto one module layout.
    checkpoint_renames: ClassVar[tuple[tuple[str, str], ...]] = ()
    # Every layer is the plain Llama recipe (RMSNorm, rotary attention over the whole context, SwiGLU): the
    # fused native decode path (quantization/gguf/fused_layers.py) computes exactly that and nothing else (and
    # no window).
    plain_layers: ClassVar[bool] = True

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__()
        self.args = self.model_args(config)
        self.model = DecoderModel(self.args, self.make_layer)
        windows = self.sliding_windows(config)
        for layer, window in zip(self.decoder_layers(), windows, strict=True):
            layer.self_attn.attn.sliding_window = window
        self.has_sliding_window = any(window is not None for window in windows)
        # Only when every layer has a window can a sequence let go of the KV before the widest one.
        bounded = [window for window in windows if window is not None]
        self.kv_window = max(bounded) if bounded and len(bounded) == len(windows) else None
        self.rotary = RotaryEmbedding(self.args.head_dim, self.args.rope)
        self.lm_head = (
            None
            if self.args.tie_word_embeddings
            else Linear(self.args.hidden_size, self.args.vocab_size, bias=False)
        )
        # A tied head multiplies with the embedding's weight, which token lookup keeps dense.
        self.tied_head: LinearMethod = DENSE

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

    def cuda_graph_capturable(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether a decode step on `device` can be captured in a CUDA graph (no host reads mid-step)."""
        return True

    def make_layer(self, index: int) -> nn.Module:
        """Layer `index` of the stack; families with other feed-forwards or attention override this."""
        return DecoderLayer(self.args)

    @classmethod
    def checkpoint_name(cls, name: str) -> str:
        for theirs, ours in cls.checkpoint_renames:
            name = name.replace(theirs, ours)
        return name

    @classmethod
    def context_length(cls, config: PretrainedConfig) -> int:
        return int(getattr(config, "max_position_embeddings", 2048))

    @classmethod
    def sliding_windows(cls, config: PretrainedConfig) -> list[int | None]:
        """Each layer's window as transformers applies it: per `layer_types` where the config has them
        (Gemma, Qwen2), else on every layer where `sliding_window` is set and not switched off."""
        layers = int(config.num_hidden_layers)
        window = getattr(config, "sliding_window", None)
        if not window:
            return [None] * layers
        types = getattr(config, "layer_types", None)
        if types is not None:
            return [int(window) if kind == "sliding_attention" else None for kind in types]
        if getattr(config, "use_sliding_window", True) is False:
            return [None] * layers
        return [int(window)] * layers

    @property
    def has_softcap(self) -> bool:
        return any(layer.self_attn.attn.softcap is not None for layer in self.decoder_layers())

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
        lengths = sequence_lengths(meta, positions) if self.rotary.by_sequence_length else None
        cos, sin = self.rotary.cos_sin(positions, h.dtype, lengths)
        for layer in self.decoder_layers():
            h = layer(h, cos, sin, meta)
        return self.model.norm(h)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.lm_head is not None:
            return self.lm_head(hidden)
        return self.tied_head.apply(hidden, self.model.embed_tokens.weight, None)

    def weight_bytes(self) -> int:
        """Memory the weights take, the methods' own copies included (those are not parameters)."""
        methods = [m.method for m in self.modules() if isinstance(m, Linear)]
        if self.lm_head is None:
            methods.append(self.tied_head)
        params = sum(p.numel() * p.element_size() for p in self.parameters())
        lookup = self.model.embed_tokens.lookup
        own = lookup.nbytes() if lookup is not None else 0
        return params + own + sum(method.nbytes() for method in methods)
