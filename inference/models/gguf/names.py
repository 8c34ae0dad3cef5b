"""A GGUF's tensors under their Hugging Face checkpoint names, one tensor at a time.

llama.cpp's converter renames every tensor, stacks each layer's experts into one 3-D tensor, fuses Phi-3's
projections, permutes Llama's Q/K rows into its rotary layout and stores Gemma's norms as 1 + w. Here all of
that is undone per tensor, lazily: a load can take the weights straight from the file without a converted
copy, holding at most one dequantized tensor at a time, and skip the ones it reads as stored blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
from gguf.constants import GGMLQuantizationType

from inference.models.gguf.architectures import architecture
from inference.models.gguf.reader import GGUFFile

if TYPE_CHECKING:
    import torch

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}
# Every expert's projection in one 3-D tensor [experts, rows, columns]; split into one tensor per expert.
_EXPERT_NAMES = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}
_KEPT_TYPES = {GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F32: np.float32}


def hf_names(gguf_name: str, shape: tuple[int, ...], arch: str = "") -> list[str] | None:
    """The Hugging Face names a GGUF tensor of `shape` in an `arch` file becomes: one, or one per expert of
    a 3-D expert tensor (in expert order); None for tensors with no counterpart. A fused projection keeps
    its fused name here (split_rows cuts it)."""
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _EXPERT_NAMES:
        projection = _EXPERT_NAMES[parts[2]]
        return [f"model.layers.{parts[1]}.mlp.experts.{e}.{projection}.{parts[3]}" for e in range(shape[0])]
    if gguf_name in _GLOBAL_NAMES:
        return [_GLOBAL_NAMES[gguf_name]]
    layer_names = {**_LAYER_NAMES, **architecture(arch).layer_names}
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in layer_names:
        return [f"model.layers.{parts[1]}.{layer_names[parts[2]]}.{parts[3]}"]
    return None


def unpermute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's per-head (half, pair) -> (pair, half) row interleave of Q/K projections."""
    half = weights.shape[0] // n_head // 2
    w = weights.reshape(n_head, half, 2, *weights.shape[1:])
    return w.swapaxes(2, 1).reshape(weights.shape)


def checkpoint_names(gguf: GGUFFile, n_heads: int, n_kv_heads: int) -> Iterator[tuple[int, dict[str, int]]]:
    """(index into gguf.tensors, {checkpoint name: its row count}) per tensor, fused projections cut."""
    for index, tensor in enumerate(gguf.tensors):
        names = hf_names(tensor.name, tensor.data.shape, gguf.architecture)
        if names is None:
            continue  # e.g. rope_freqs: derived from config.rope_parameters instead
        rows = int(tensor.dims[1]) if len(tensor.dims) > 1 else int(tensor.dims[0])
        out: dict[str, int] = {}
        for name in names:
            out.update(fused_shards(name, rows, n_heads, n_kv_heads) or [(name, rows)])
        yield index, out


def checkpoint_rows(gguf: GGUFFile, n_heads: int, n_kv_heads: int) -> dict[str, int]:
    """Every checkpoint tensor's row count, read from the file's headers alone."""
    return {
        name: rows for _, names in checkpoint_names(gguf, n_heads, n_kv_heads) for name, rows in names.items()
    }


def checkpoint_tensors(
    gguf: GGUFFile,
    n_heads: int,
    n_kv_heads: int,
    *,
    narrow: torch.dtype | None = None,
    skip: Callable[[str], bool] = lambda name: False,
) -> Iterator[tuple[str, torch.Tensor]]:
    """Each checkpoint tensor of the file, dequantized by gguf-py (the reference every kernel is held to),
    one GGUF tensor at a time; a GGUF tensor whose every name `skip`s is never dequantized. `narrow`: the
    dtype quantized tensors are handed out in (None: float32, bit-exact to the file's values)."""
    import torch
    from gguf.quants import dequantize

    arch = gguf.architecture
    for index, names in checkpoint_names(gguf, n_heads, n_kv_heads):
        if all(map(skip, names)):
            continue
        tensor = gguf.tensors[index]
        kept = _KEPT_TYPES.get(tensor.ggml_type)
        if kept is not None:
            data = np.asarray(tensor.data, dtype=kept).reshape(tuple(reversed(tensor.dims)))
        else:
            data = dequantize(tensor.data, tensor.ggml_type)
        whole = hf_names(tensor.name, tensor.data.shape, arch) or []
        parts = [data] if len(whole) == 1 else list(data)  # one per expert of a 3-D tensor
        for whole_name, whole_part in zip(whole, parts, strict=True):
            for name, part in split_rows(whole_name, whole_part, n_heads, n_kv_heads):
                if skip(name):
                    continue
                if architecture(arch).offset_norms and name.endswith("norm.weight"):
                    part = part - np.float32(1.0)  # stored as 1 + w
                if architecture(arch).permuted_qk and name.endswith(("q_proj.weight", "k_proj.weight")):
                    part = unpermute(part, n_heads if "q_proj" in name else n_kv_heads)
                if name.endswith("shared_expert_gate.weight"):
                    part = part.reshape(1, -1)  # llama.cpp keeps the one-row gate as a vector
                # Copy: F32/F16 data are read-only views of the mapped file, and the parts of one dequantized
                # tensor (experts, fused shards) must not share memory (safetensors refuses that).
                value = torch.from_numpy(np.array(part, order="C", copy=True))
                if narrow is not None and kept is None:
                    # bf16 sources stay bf16 (exact); other dequantized blocks fit fp16's range and precision.
                    bf16 = tensor.ggml_type == GGMLQuantizationType.BF16
                    value = value.to(torch.bfloat16 if bf16 else narrow)
                yield name, value
        gguf.release(tensor.data)  # every part above is a copy: the file's pages need not stay counted


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
