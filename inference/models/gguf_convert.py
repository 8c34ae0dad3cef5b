"""Convert a GGUF file once into a cached Hugging Face style safetensors directory.

The cache key is the file's sha256, so a renamed or copied file still hits the cache and an edited one
does not. Hashing a multi-GB file is slow, so a (path, size, mtime) -> hash memo sits beside the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf.constants import GGMLQuantizationType
from safetensors.torch import save_file

from inference.cache_dir import ensure_private_dir, private_temp_file
from inference.models.gguf_dense_config import ARCH_LAYER_NAMES, OFFSET_NORM_ARCHS, dense_config, split_rows
from inference.models.gguf_file import GGUFFile
from inference.models.gguf_moe_config import OWN_CONFIGS, moe_config

logger = logging.getLogger(__name__)

# GGUF `general.architecture` -> HF `architectures` entry of the converted config (a "llama" file with
# experts is Mixtral: llama.cpp writes Mixtral under the llama architecture).
GGUF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen2moe": "Qwen2MoeForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "phi3": "Phi3ForCausalLM",
}

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
# Only llama.cpp's llama converter permutes Q/K rows (into its interleaved rotary layout); qwen2/3 are as is.
_PERMUTED_ARCHS = {"llama"}
_HASH_MEMO = "hash-memo.json"
FP32_MAX_ELEMENTS = 1_500_000_000  # above this many weights, dequantize to 16-bit instead of fp32

conversion_count = 0  # how many conversions this process ran; lets tests prove a cache hit


def file_sha256(path: Path, cache_dir: Path) -> str:
    """sha256 of `path`, memoized by (resolved path, size, mtime_ns) in `cache_dir`."""
    stat = path.stat()
    key = str(path.resolve())
    memo_path = cache_dir / _HASH_MEMO
    memo: dict[str, dict[str, object]] = {}
    if memo_path.is_file():
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}  # a corrupt memo only costs a rehash
    entry = memo.get(key)
    if entry and entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns:
        return str(entry["sha256"])
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
    sha = digest.hexdigest()
    memo[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha}
    ensure_private_dir(cache_dir)
    tmp = private_temp_file(cache_dir, prefix=f".{_HASH_MEMO}-")
    try:
        tmp.write_text(json.dumps(memo, indent=1))
        tmp.replace(memo_path)
    finally:
        tmp.unlink(missing_ok=True)
    return sha


def ensure_converted(gguf_path: Path, cache_dir: Path) -> Path:
    """Return the cached HF directory for `gguf_path`, converting it first if this content was never seen."""
    gguf_cache = ensure_private_dir(cache_dir / "gguf")  # what is converted here is loaded as weights later
    sha = file_sha256(gguf_path, gguf_cache)
    target = gguf_cache / sha[:32]
    if (target / "config.json").is_file():
        logger.info("Reusing converted GGUF %s from %s", gguf_path.name, target)
        return target
    logger.info("Converting GGUF %s (sha256 %s) into %s", gguf_path.name, sha[:12], target)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=gguf_cache))
    try:
        _convert(gguf_path, tmp)
        try:
            tmp.rename(target)  # atomic: readers see either nothing or a complete directory
        except OSError:
            if not (target / "config.json").is_file():
                raise
            logger.info("Another process converted %s concurrently; using its result", gguf_path.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    global conversion_count
    conversion_count += 1
    logger.info("Converted %s in %.1fs", gguf_path.name, time.monotonic() - started)
    return target


def _convert(gguf_path: Path, out_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast

    gguf = GGUFFile(gguf_path)
    arch = gguf.architecture
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(sorted(GGUF_ARCHITECTURES))}"
        )
    # The tensors come from our reader; transformers' config and tokenizer loaders each parse the file with
    # gguf-py's (seconds for a large vocabulary), which is why this runs once per file content.
    if arch in OWN_CONFIGS:  # architectures transformers' GGUF config reader does not know
        config = OWN_CONFIGS[arch](gguf)
    else:
        config = AutoConfig.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, trust_remote_code=False
        )
        config.architectures = [GGUF_ARCHITECTURES[arch]]
        config = dense_config(gguf, moe_config(gguf, config))
    tensors = _dequantized_tensors(gguf, config.num_attention_heads, config.num_key_value_heads)
    # transformers' GGUF config mapping misses some keys (qwen3 attention.key_length, sometimes vocab_size);
    # the tensor shapes are the ground truth.
    config.head_dim = tensors["model.layers.0.self_attn.q_proj.weight"].shape[0] // config.num_attention_heads
    config.vocab_size = tensors["model.embed_tokens.weight"].shape[0]
    if "lm_head.weight" not in tensors:
        config.tie_word_embeddings = True  # llama.cpp drops output.weight when it equals the embedding
    rope_freqs = gguf.tensor("rope_freqs.weight")
    if rope_freqs is not None:
        config.rope_parameters = _llama3_rope_from_factors(
            dict(getattr(config, "rope_parameters", None) or {}), config.head_dim, np.asarray(rope_freqs.data)
        )
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config.save_pretrained(out_dir)
    # The generic fast tokenizer reads any GGUF vocabulary; AutoTokenizer first asks for the config above.
    tokenizer_class = PreTrainedTokenizerFast if arch in OWN_CONFIGS else AutoTokenizer
    tokenizer = tokenizer_class.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, trust_remote_code=False
    )
    tokenizer.save_pretrained(out_dir)
    (out_dir / "mooncake-source.json").write_text(json.dumps({"gguf": gguf_path.name, "architecture": arch}))


def _dequantized_tensors(gguf: GGUFFile, n_heads: int, n_kv_heads: int) -> dict[str, torch.Tensor]:
    from gguf.quants import dequantize

    keep_types = {GGMLQuantizationType.F16: np.float16, GGMLQuantizationType.F32: np.float32}
    num_elements = sum(t.n_elements for t in gguf.tensors)
    # Small models dequantize to fp32, bit-exact to the GGUF values (the CPU fp32 oracle depends on it);
    # large ones to 16 bits (what llama.cpp's GPU kernels compute with), or a 4 GB Q4 file would cache 28 GB.
    narrow = None if num_elements <= FP32_MAX_ELEMENTS else torch.float16
    out: dict[str, torch.Tensor] = {}
    for tensor in gguf.tensors:
        names = hf_names(tensor.name, tensor.data.shape, gguf.architecture)
        if names is None:
            continue  # e.g. rope_freqs: derived from config.rope_parameters instead
        kept = keep_types.get(tensor.ggml_type)
        if kept is not None:
            data = np.asarray(tensor.data, dtype=kept).reshape(tuple(reversed(tensor.dims)))
        else:
            data = dequantize(tensor.data, tensor.ggml_type)
        parts = [data] if len(names) == 1 else list(data)  # one per expert of a 3-D tensor
        for name, part in _split(names, parts, n_heads, n_kv_heads):
            if gguf.architecture in OFFSET_NORM_ARCHS and name.endswith("norm.weight"):
                part = part - np.float32(1.0)  # stored as 1 + w
            if gguf.architecture in _PERMUTED_ARCHS and name.endswith(("q_proj.weight", "k_proj.weight")):
                part = _unpermute(part, n_heads if "q_proj" in name else n_kv_heads)
            if name.endswith("shared_expert_gate.weight"):
                part = part.reshape(1, -1)  # llama.cpp keeps the one-row gate as a vector
            # Copy: F32/F16 data are read-only views of the memory-mapped file.
            value = torch.from_numpy(np.array(part, order="C", copy=True))
            if narrow is not None and kept is None:
                # bf16 sources stay bf16 (exact); other dequantized blocks fit fp16's range and precision.
                value = value.to(torch.bfloat16 if tensor.ggml_type == GGMLQuantizationType.BF16 else narrow)
            out[name] = value
    return out


def _split(
    names: list[str], parts: list[np.ndarray], n_heads: int, n_kv_heads: int
) -> list[tuple[str, np.ndarray]]:
    return [pair for n, p in zip(names, parts, strict=True) for pair in split_rows(n, p, n_heads, n_kv_heads)]


def _llama3_rope_from_factors(rope: dict[str, Any], head_dim: int, factors: np.ndarray) -> dict[str, Any]:
    """llama.cpp stores Llama 3.x rope scaling only as per-frequency divisors (rope_freqs); transformers
    ignores them. Every Llama 3.x release uses low 1 / high 4 / original 8192, so rebuild those parameters
    and check they reproduce the stored divisors exactly rather than guess silently."""
    from inference.models.rotary import inverse_frequencies

    rope = {**rope, "rope_type": "default"}
    rope.setdefault("rope_theta", 10000.0)
    base = inverse_frequencies(head_dim, rope)
    rope.update(
        rope_type="llama3",
        factor=float(factors.max()),
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    expected = base / torch.from_numpy(factors.astype(np.float32).reshape(-1))
    if expected.shape != base.shape or not torch.allclose(
        inverse_frequencies(head_dim, rope), expected, rtol=1e-4
    ):
        raise ValueError(
            "GGUF rope_freqs do not match Llama 3 rope scaling; this rope variant is not supported"
        )
    return rope


def _hf_name(gguf_name: str, arch: str) -> str | None:
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    layer_names = {**_LAYER_NAMES, **ARCH_LAYER_NAMES.get(arch, {})}
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in layer_names:
        return f"model.layers.{parts[1]}.{layer_names[parts[2]]}.{parts[3]}"
    return None


def hf_names(gguf_name: str, shape: tuple[int, ...], arch: str = "") -> list[str] | None:
    """The Hugging Face names a GGUF tensor of `shape` in an `arch` file becomes: one, or one per expert of
    a 3-D expert tensor (in expert order); None for tensors with no counterpart. A fused projection keeps
    its fused name here (gguf_dense_config.split_rows cuts it)."""
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _EXPERT_NAMES:
        projection = _EXPERT_NAMES[parts[2]]
        return [f"model.layers.{parts[1]}.mlp.experts.{e}.{projection}.{parts[3]}" for e in range(shape[0])]
    name = _hf_name(gguf_name, arch)
    return None if name is None else [name]


def _unpermute(weights: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's per-head (half, pair) -> (pair, half) row interleave of Q/K projections."""
    half = weights.shape[0] // n_head // 2
    w = weights.reshape(n_head, half, 2, *weights.shape[1:])
    return w.swapaxes(2, 1).reshape(weights.shape)
