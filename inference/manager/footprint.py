"""A model's memory estimated from its files, before loading it: what manager.memory_plan plans with.

Reads only headers (a GGUF's metadata, config.json and safetensors headers), never the weights. The sizes
follow what the loader and the model runner will allocate: weights in the configured dtype, and the KV
cache as ModelRunner sizes it (kv_cache.cpu_kv_budget on CPU; on a GPU at least one full-length request).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from inference.config import EngineConfig
from inference.manager.memory_plan import Footprint
from inference.models.kv_cache import KVBudget, max_model_len_error

# gguf_blocks.py's (kept torch-free here)
BLOCK_TYPES = ("Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")
KQUANT_TYPES = BLOCK_TYPES[3:]

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Mirrors inference.models.kv_cache's CPU default (kept torch-free here).
CPU_KV_CAP_BYTES = 2 << 30
CPU_KV_RAM_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class ModelShape:
    num_params: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    context_length: int
    file_bytes: int
    # A GGUF's tensors in types the CPU block kernels read (q4_decode.py): their bytes in the file, and the
    # elements of those that are projections (the token embedding stays dense for lookups).
    block_bytes: int = 0
    block_params: int = 0
    # Its token embedding, where that is in such a type (not Q4): the bytes an fp32 model's lookups keep
    # beyond block_bytes (none when tied: the head's blocks are shared), and its elements.
    lookup_bytes: int = 0
    lookup_params: int = 0
    kquants: bool = False  # some of its projections are K-quants (an fp32 AVX2 model then reads its blocks)


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """Where the models will run: the device's memory and what dtype "auto" means there."""

    kind: str  # "cpu" or "cuda"
    total_bytes: int  # the GPU's memory, or the machine's RAM
    available_bytes: int  # free now
    auto_dtype_bytes: int
    block_kernels: bool = False  # the CPU runs the GGUF block kernels (AVX512-BF16)
    amx: bool = False  # and has AMX tiles (where a model keeps no dense copy by default)
    avx2_blocks: bool = False  # fp32 models with dtype "auto" read a GGUF's blocks (avx2_blocks.py)


def probe_device(device: str = "auto") -> DeviceFacts:
    """The device EngineConfig.device resolves to (imports torch; on a GPU, initialises CUDA)."""
    import psutil
    import torch

    from inference.device import fast_bf16_cpu

    ram = psutil.virtual_memory()
    if device != "cpu" and torch.cuda.is_available():
        index = torch.device(device if device.startswith("cuda") else "cuda").index or 0
        free, total = torch.cuda.mem_get_info(index)
        return DeviceFacts("cuda", int(total), int(free), 2)  # "auto": bf16 or fp16, 2 bytes either way
    from inference.models.kernel_build import avx2_supported, cpu_supported
    from inference.models.tile_linear import cpu_has_amx

    auto = 2 if fast_bf16_cpu() else 4
    avx2 = auto == 4 and avx2_supported()
    return DeviceFacts("cpu", int(ram.total), int(ram.available), auto, cpu_supported(), cpu_has_amx(), avx2)


def read_shape(path: Path) -> ModelShape:
    """The parameter count and KV geometry of a .gguf file or a Hugging Face folder."""
    if path.is_file():
        return _gguf_shape(path)
    config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    heads = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    # Sliding windows are masked in the attention, not a cap: a sequence may fill the whole context.
    context = int(config.get("max_position_embeddings", 2048))
    files = sorted(path.glob("*.safetensors"))
    return ModelShape(
        num_params=sum(_safetensors_params(f) for f in files),
        num_layers=int(config["num_hidden_layers"]),
        num_kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=head_dim,
        context_length=context,
        file_bytes=sum(f.stat().st_size for f in files),
    )


def load_refusal(config: EngineConfig, shape: ModelShape, footprint: Footprint) -> str | None:
    """What the load would refuse about `config` for this model (its `footprint`, from estimate()), known
    before any load: a max_model_len over its context, or over what an explicit kv_cache_memory_bytes
    holds (the load's own words, inference.core.model_runner)."""
    requested = config.max_model_len
    if requested is None:
        return None
    if requested > shape.context_length:
        return (
            f"max_model_len={requested} exceeds the model's context length {shape.context_length}; lower it, "
            "or leave it out to use the model's own"
        )
    explicit = config.kv_cache_memory_bytes
    if explicit is None:
        return None
    per_block = footprint.block_size * footprint.kv_bytes_per_token
    capacity = explicit // per_block * config.block_size
    if requested <= capacity:
        return None
    needed = -(-requested // config.block_size) * per_block
    budget = KVBudget(explicit, f"kv_cache_memory_bytes={explicit}")
    return str(max_model_len_error(requested, capacity_tokens=capacity, needed_bytes=needed, budget=budget))


def estimate(name: str, key: str, config: EngineConfig, shape: ModelShape, device: DeviceFacts) -> Footprint:
    """What `config` will take on `device`: weights in its dtype, and its KV cache as the runner sizes it."""
    elem = DTYPE_BYTES.get(config.dtype, device.auto_dtype_bytes)
    weights = _weight_bytes(config, shape, device, elem)
    per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * elem
    length = min(config.max_model_len or shape.context_length, shape.context_length)
    one_request = math.ceil(length / config.block_size) * config.block_size * per_token
    base = Footprint(
        name=name,
        key=key,
        weights_bytes=weights,
        kv_bytes=one_request,
        kv_bytes_per_token=per_token,
        max_model_len=length,
        block_size=config.block_size,
    )
    explicit = config.kv_cache_memory_bytes
    if device.kind == "cuda":
        ceiling = int(device.total_bytes * config.gpu_memory_utilization)
        if explicit is not None:
            return replace(base, kv_bytes=explicit, kv_sequences=0, ceiling_bytes=ceiling)
        return replace(base, ceiling_bytes=ceiling, fills_ceiling=True)
    if explicit is not None:
        return replace(base, kv_bytes=explicit, kv_sequences=0)
    cap = min(CPU_KV_CAP_BYTES, int(device.total_bytes * CPU_KV_RAM_FRACTION))
    kv = min(cap, config.max_num_seqs * one_request)
    return replace(base, kv_bytes=kv, kv_sequences=config.max_num_seqs)


def _weight_bytes(config: EngineConfig, shape: ModelShape, device: DeviceFacts, elem: int) -> int:
    """quantization "gguf" keeps the file's 4-bit blocks as the weights. A bf16 CPU model from a GGUF keeps
    the blocks its kernels read, and its other weights in bf16: the block-read projections too where it
    keeps a dense copy of them (gguf_dense_copy; by default only where the CPU lacks AMX). So does an fp32 one
    whose dtype is "auto" on a CPU without AVX512-BF16, unless it asks for the dense copy (then it is the
    dense fp32 model)."""
    if config.quantization == "gguf":
        return shape.file_bytes
    dense = shape.num_params * elem
    bf16_blocks = elem == 2 and device.block_kernels
    fp32_blocks = elem == 4 and config.dtype == "auto" and device.avx2_blocks
    fp32_blocks = fp32_blocks and (
        config.gguf_dense_copy is False or (config.gguf_dense_copy is None and shape.kquants)
    )
    reads_blocks = device.kind == "cpu" and config.q4_decode and (bf16_blocks or fp32_blocks)
    if not reads_blocks or shape.block_bytes == 0:
        return dense
    if fp32_blocks:  # no dense copy; the embedding looks its rows up in the blocks (block_embedding.py)
        held = shape.block_params + shape.lookup_params
        return dense + shape.block_bytes + shape.lookup_bytes - held * elem
    dense_copy = config.gguf_dense_copy if config.gguf_dense_copy is not None else not device.amx
    return dense + shape.block_bytes - (0 if dense_copy else shape.block_params * elem)


def _gguf_shape(path: Path) -> ModelShape:
    from inference.models.gguf_file import GGUFFile

    reader = GGUFFile(path)

    def field(name: str, default: int | None = None) -> int:
        found = reader.field(name)
        if found is None:
            if default is None:
                raise ValueError(f"{path.name}: GGUF metadata {name} is missing")
            return default
        return int(found)

    arch = str(reader.field("general.architecture", "llama"))
    heads = field(f"{arch}.attention.head_count")
    # The tensors gguf_blocks reads; the embedding's only as a tied head (and never a Q4 one).
    tied = all(t.name != "output.weight" for t in reader.tensors)
    read = [
        t
        for t in reader.tensors
        if t.type_name in BLOCK_TYPES
        and len(t.dims) in (2, 3)  # a 3-D tensor holds every expert of a layer, each read as blocks
        and (t.name != "token_embd.weight" or (tied and t.type_name not in ("Q4_0", "Q4_1")))
    ]
    embedding = [t for t in reader.tensors if t.name == "token_embd.weight" and t.type_name in BLOCK_TYPES]
    lookup = [t for t in embedding if t.type_name not in ("Q4_0", "Q4_1")]
    head_dim = field(f"{arch}.attention.key_length", field(f"{arch}.embedding_length") // heads)
    return ModelShape(
        num_params=sum(t.n_elements for t in reader.tensors),
        num_layers=field(f"{arch}.block_count"),
        num_kv_heads=field(f"{arch}.attention.head_count_kv", heads),
        head_dim=head_dim,
        context_length=field(f"{arch}.context_length", 2048),
        file_bytes=path.stat().st_size,
        block_bytes=sum(t.data.nbytes for t in read),
        block_params=sum(t.n_elements for t in read if t.name != "token_embd.weight"),
        lookup_bytes=0 if tied else sum(t.data.nbytes for t in lookup),
        lookup_params=sum(t.n_elements for t in lookup),
        kquants=any(t.type_name in KQUANT_TYPES for t in read),
    )


def _safetensors_params(path: Path) -> int:
    """Elements in one safetensors file, from its JSON header (8-byte little-endian length, then JSON)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
