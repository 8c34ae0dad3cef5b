"""Gemma 2, Gemma 3 (text) and Phi-3 GGUFs as llama.cpp's converter writes them: their tensor names, the
norm offset and fused projections undone, and the config settings transformers' GGUF config reader leaves
out (soft caps, layer pattern, attention scale, per-layer-type rope, LongRoPE).

Some settings are not in the file at all: llama.cpp derives them, and so do we the same way. Gemma's
attention scale is 1/sqrt(head_dim) except for the 27B models (1/sqrt(hidden / heads)), recognised by their
layer count; Gemma 2 alternates local and global layers starting with a local one, Gemma 3 has five local
layers per global one, unless the file carries an explicit sliding_window_pattern.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from inference.models.gguf.reader import GGUFFile

_GEMMA_NORMS = {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",  # Gemma's pre-feed-forward norm, not Llama's post-attention one
    "post_ffw_norm": "post_feedforward_layernorm",
}
# Per architecture, the layer tensor names that differ from (or are missing in) the Llama-family table.
ARCH_LAYER_NAMES: dict[str, dict[str, str]] = {
    "gemma2": _GEMMA_NORMS,
    "gemma3": _GEMMA_NORMS,
    # Fused in the file as in Phi-3's own checkpoints: [q; k; v] rows and [gate; up] rows.
    "phi3": {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"},
}
# llama.cpp stores Gemma's RMSNorm weights as the multiplier 1 + w; Hugging Face (and we) keep w.
OFFSET_NORM_ARCHS = frozenset({"gemma2", "gemma3"})
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
_GEMMA_LOCAL_PERIOD = {"gemma2": 2, "gemma3": 6}


def fused_shards(name: str, rows: int, num_heads: int, num_kv_heads: int) -> list[tuple[str, int]] | None:
    """A fused projection's shards as (Hugging Face name, row count) in row order, so each loads (and each
    block matrix stacks) like a Llama checkpoint's separate q/k/v and gate/up tensors; None if not fused."""
    module, _, kind = name.rpartition(".")
    if module.endswith("self_attn.qkv_proj"):
        head_dim = rows // (num_heads + 2 * num_kv_heads)
        sizes = [num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim]
        prefix = module.removesuffix("qkv_proj")
        return [(f"{prefix}{p}_proj.{kind}", size) for p, size in zip("qkv", sizes, strict=True)]
    if module.endswith("mlp.gate_up_proj"):
        prefix = module.removesuffix("gate_up_proj")
        return [(f"{prefix}gate_proj.{kind}", rows // 2), (f"{prefix}up_proj.{kind}", rows // 2)]
    return None


def split_rows(
    name: str, data: np.ndarray, num_heads: int, num_kv_heads: int
) -> list[tuple[str, np.ndarray]]:
    """`data` under `name`, or a fused projection's rows cut into its shards."""
    shards = fused_shards(name, data.shape[0], num_heads, num_kv_heads)
    if shards is None:
        return [(name, data)]
    out, start = [], 0
    for shard, size in shards:
        out.append((shard, data[start : start + size]))
        start += size
    return out


def dense_config(gguf: GGUFFile, config: Any) -> Any:
    """`config` (transformers' reading of the file) with the settings it leaves out or gets wrong."""
    if gguf.architecture in _GEMMA_27B_LAYERS:
        return _gemma(gguf, config)
    if gguf.architecture == "phi3":
        return _phi3(gguf, config)
    return config


def _gemma(gguf: GGUFFile, config: Any) -> Any:
    arch = gguf.architecture
    layers, heads, hidden = config.num_hidden_layers, config.num_attention_heads, config.hidden_size
    head_dim = int(gguf.field(f"{arch}.attention.key_length") or hidden // heads)
    config.head_dim = head_dim
    config.query_pre_attn_scalar = hidden // heads if layers == _GEMMA_27B_LAYERS[arch] else head_dim
    window = gguf.field(f"{arch}.attention.sliding_window")
    pattern = gguf.field(f"{arch}.attention.sliding_window_pattern")
    if not window:
        local = [False] * layers
    elif pattern is not None:
        local = [bool(p) for p in pattern]
    else:
        period = _GEMMA_LOCAL_PERIOD[arch]
        local = [(index + 1) % period != 0 for index in range(layers)]
    config.sliding_window = int(window) if window else None
    config.layer_types = ["sliding_attention" if is_local else "full_attention" for is_local in local]
    final_cap = gguf.field(f"{arch}.final_logit_softcapping")
    global_rope: dict[str, Any] = {"rope_type": "default"}
    if arch == "gemma2":
        attention_cap = gguf.field(f"{arch}.attn_logit_softcapping")
        if attention_cap is not None:
            config.attn_logit_softcapping = float(attention_cap)
        if final_cap is not None:
            config.final_logit_softcapping = float(final_cap)
        global_rope["rope_theta"] = float(gguf.field(f"{arch}.rope.freq_base", 1e4))
        config.rope_parameters = global_rope
        return config
    config.attn_logit_softcapping = None
    config.final_logit_softcapping = float(final_cap) if final_cap else None
    global_rope["rope_theta"] = float(gguf.field(f"{arch}.rope.freq_base", 1e6))
    factor = gguf.field(f"{arch}.rope.scaling.factor")
    if gguf.field(f"{arch}.rope.scaling.type") == "linear" and factor:
        global_rope.update(rope_type="linear", factor=float(factor))
    local_theta = float(gguf.field(f"{arch}.rope.freq_base_swa", 1e4))  # llama.cpp's fixed local base
    config.rope_parameters = {
        "full_attention": global_rope,
        "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
    }
    return config


def _phi3(gguf: GGUFFile, config: Any) -> Any:
    theta = float(gguf.field("phi3.rope.freq_base", 1e4))
    original = int(gguf.field("phi3.rope.scaling.original_context_length") or config.max_position_embeddings)
    config.original_max_position_embeddings = original
    config.pad_token_id = gguf.field("tokenizer.ggml.padding_token_id")  # not Phi3Config's 32000 default
    window = gguf.field("phi3.attention.sliding_window")
    config.sliding_window = int(window) if window else None  # llama.cpp writes 0 for "none" (Phi-4)
    long, short = gguf.tensor("rope_factors_long.weight"), gguf.tensor("rope_factors_short.weight")
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": 1.0}
    if long is not None and short is not None:
        rope.update(
            rope_type="longrope",
            long_factor=[float(x) for x in np.asarray(long.data, dtype=np.float32).reshape(-1)],
            short_factor=[float(x) for x in np.asarray(short.data, dtype=np.float32).reshape(-1)],
            original_max_position_embeddings=original,
        )
    rotated = gguf.field("phi3.rope.dimension_count")
    head_dim = config.hidden_size // config.num_attention_heads
    if rotated and int(rotated) != head_dim:  # Phi-4-mini rotates part of each head; say so, not guess
        rope["partial_rotary_factor"] = int(rotated) / head_dim
    config.rope_parameters = rope
    return config
