"""A model's memory estimated from its files, before loading it: what manager.memory_plan plans with.

Reads only headers (a GGUF's metadata, config.json and safetensors headers), never the weights. The sizes
follow what the loader and the model runner will allocate: weights in the configured dtype, and the KV
cache as ModelRunner sizes it (kv_budget.cpu_kv_budget on CPU, the same function; on a GPU at least one
full-length request), in its kv_cache_dtype.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, replace
from pathlib import Path

from inference.config import EngineConfig
from inference.config_groups import CpuKernelConfig
from inference.manager.memory_plan import Footprint
from inference.models.layers.kv_budget import (
    KV_DTYPE_BYTES,
    KVBudget,
    cpu_kv_budget,
    default_kv_tokens,
    max_model_len_error,
    resolve_kv_dtype,
)
from inference.models.quantization.plan import BLOCK_TYPES, INT4_TYPES, CpuFacts, WeightPlan, plan_weights

DTYPE_BYTES = KV_DTYPE_BYTES  # an element of each dtype, weights and cache alike


@dataclass(frozen=True, slots=True)
class ModelShape:
    num_params: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    context_length: int
    file_bytes: int
    # A GGUF's tensors in types the CPU block kernels read (quantization/gguf/avx512.py): their bytes in the
    # file, and the elements of those that are projections (the token embedding stays dense for lookups).
    block_bytes: int = 0
    block_params: int = 0
    # Its token embedding, where that is in such a type (not Q4): the bytes an fp32 model's lookups keep
    # beyond block_bytes (none when tied: the head's blocks are shared), and its elements.
    lookup_bytes: int = 0
    lookup_params: int = 0
    file_types: frozenset[str] | None = None  # a GGUF's tensor types (GGUFFile.tensor_types); None: not one


@dataclass(frozen=True, slots=True)
class DeviceFacts:
    """Where the models will run: the device's memory and what dtype "auto" means there."""

    kind: str  # "cpu" or "cuda"
    total_bytes: int  # the GPU's memory, or the machine's RAM
    available_bytes: int  # free now
    auto_dtype_bytes: int
    # What the CPU's kernels passed at their checks (quantization/probe.py), as the weight plan reads them:
    block_kernels: bool = False  # the AVX512-BF16 GGUF block kernels
    amx: bool = False  # the AMX tile linears (where a model keeps no dense copy by default)
    avx2_blocks: bool = False  # the AVX2 GGUF block kernels (fp32 models with dtype "auto")
    packing: bool | None = None  # oneDNN's packed bf16 linears; None: wherever "auto" is bf16

    def cpu(self) -> CpuFacts:
        """The facts the weight plan is decided from (quantization/plan.py)."""
        bf16 = self.auto_dtype_bytes == 2
        return CpuFacts(
            kind=self.kind,
            auto_dtype="bfloat16" if bf16 else "float32",
            avx512_blocks=self.block_kernels,
            amx_tiles=self.amx,
            avx2_blocks=self.avx2_blocks,
            onednn_packing=bf16 if self.packing is None else self.packing,
        )


def weight_plan(config: EngineConfig, device: DeviceFacts, file_types: frozenset[str] | None) -> WeightPlan:
    """The plan the load will make for `config` on `device` (the same function the load calls)."""
    return plan_weights(
        cpu=device.cpu(),
        dtype=config.dtype,
        quantization=config.quantization,
        kernels=config.cpu_kernels(),
        file_types=file_types,
    )


def probe_device(device: str = "auto", kernels: CpuKernelConfig | None = None) -> DeviceFacts:
    """The device EngineConfig.device resolves to (imports torch; on a GPU, initialises CUDA), with what its
    CPU kernels passed under `kernels`' settings (the load's own probe, quantization/probe.py)."""
    import psutil
    import torch

    ram = psutil.virtual_memory()
    if device != "cpu" and torch.cuda.is_available():
        index = torch.device(device if device.startswith("cuda") else "cuda").index or 0
        free, total = torch.cuda.mem_get_info(index)
        return DeviceFacts("cuda", int(total), int(free), 2)  # "auto": bf16 or fp16, 2 bytes either way
    from inference.models.quantization.probe import probe_cpu

    cpu = probe_cpu(kernels or CpuKernelConfig())
    return DeviceFacts(
        "cpu",
        int(ram.total),
        int(ram.available),
        2 if cpu.auto_dtype == "bfloat16" else 4,
        block_kernels=cpu.avx512_blocks,
        amx=cpu.amx_tiles,
        avx2_blocks=cpu.avx2_blocks,
        packing=cpu.onednn_packing,
    )


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
    compute = config.dtype if config.dtype in DTYPE_BYTES else "bfloat16" if elem == 2 else "float32"
    kv_dtype = resolve_kv_dtype(
        config.kv_cache_dtype, compute, dtype_setting=config.dtype, device_type=device.kind
    )
    kv_elem = DTYPE_BYTES[kv_dtype]
    per_token = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * kv_elem
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
        kv_dtype=kv_dtype,
    )
    explicit = config.kv_cache_memory_bytes
    if device.kind == "cuda":
        ceiling = int(device.total_bytes * config.gpu_memory_utilization)
        if explicit is not None:
            rule = f"kv_cache_memory_bytes={explicit}"
            return replace(base, kv_bytes=explicit, kv_sequences=0, ceiling_bytes=ceiling, kv_rule=rule)
        rule = "one max_model_len request at least; at load, what gpu_memory_utilization leaves"
        return replace(base, ceiling_bytes=ceiling, fills_ceiling=True, kv_rule=rule)
    if explicit is not None:
        return replace(base, kv_bytes=explicit, kv_sequences=0, kv_rule=f"kv_cache_memory_bytes={explicit}")
    budget = cpu_kv_budget(
        None,
        bytes_per_token=per_token,
        max_model_len=length,
        max_num_seqs=config.max_num_seqs,
        block_size=config.block_size,
        ram_bytes=device.total_bytes,
    )
    block = per_token * config.block_size
    kv = budget.bytes // block * block  # what the runner allocates: whole blocks of the budget
    tokens = default_kv_tokens(max_model_len=length, max_num_seqs=config.max_num_seqs, block_size=1)
    if kv < tokens * per_token:  # cut to a bound: a fixed size, whatever max_model_len is
        return replace(base, kv_bytes=kv, kv_sequences=0, kv_rule=budget.source)
    return replace(base, kv_bytes=kv, kv_extra_tokens=tokens - length, kv_rule=budget.source)


def _weight_bytes(config: EngineConfig, shape: ModelShape, device: DeviceFacts, elem: int) -> int:
    """As the weight plan holds them: int4 keeps the file's 4-bit blocks as the weights. A model that reads
    a GGUF's blocks keeps them, and its other weights in its dtype: the block-read projections too where
    the plan keeps a dense copy of them. Where the embedding looks its rows up in the blocks (fp32 on AVX2),
    it holds no dense table either."""
    plan = weight_plan(config, device, shape.file_types)
    if plan.int4:
        return shape.file_bytes
    dense = shape.num_params * elem
    if plan.blocks is None or shape.block_bytes == 0:
        return dense
    if plan.embedding_lookup:
        held = shape.block_params + shape.lookup_params
        return dense + shape.block_bytes + shape.lookup_bytes - held * elem
    return dense + shape.block_bytes - (0 if plan.dense_copy else shape.block_params * elem)


def _gguf_shape(path: Path) -> ModelShape:
    from inference.models.gguf.reader import GGUFFile

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
        and (t.name != "token_embd.weight" or (tied and t.type_name not in INT4_TYPES))
    ]
    embedding = [t for t in reader.tensors if t.name == "token_embd.weight" and t.type_name in BLOCK_TYPES]
    lookup = [t for t in embedding if t.type_name not in INT4_TYPES]
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
        file_types=reader.tensor_types(),
    )


def _safetensors_params(path: Path) -> int:
    """Elements in one safetensors file, from its JSON header (8-byte little-endian length, then JSON)."""
    with path.open("rb") as handle:
        (length,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(length))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")
