"""The weight plan made real for a model being loaded: the kernels it names loaded, the GGUF's blocks read
once, and, once the weights are in, one LinearMethod per projection and the head, and the embedding's
lookup where the plan has one. The decision itself is plan.py's."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.config_groups import CpuKernelConfig
from inference.device import resolve_dtype
from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.gguf.reader import GGUFFile
from inference.models.layers.linear import Linear
from inference.models.quantization.amx_tiles import TileMethod, pack_tiles
from inference.models.quantization.base import DENSE, LinearMethod
from inference.models.quantization.gguf.avx2 import Avx2Kernel, activations_for, load_avx2_kernel
from inference.models.quantization.gguf.avx512 import Avx512Kernel, load_kernel
from inference.models.quantization.gguf.embedding import BlockEmbedding
from inference.models.quantization.gguf.formats import BlockMatrix, GGUFBlocks, Q4Blocks, read_blocks
from inference.models.quantization.gguf.layout import decode_weight, decode_weights, eligible
from inference.models.quantization.gguf.match import matches
from inference.models.quantization.gguf.method import BlockKernel, GGUFBlocksMethod, GGUFDecodeMethod
from inference.models.quantization.int4 import Int4Method, int4_supported, pack_int4
from inference.models.quantization.onednn import PackedMethod, pack_weight
from inference.models.quantization.plan import CpuFacts, WeightPlan, plan_weights
from inference.models.quantization.probe import kernel_cache, probe_cpu
from inference.progress import KERNELS, report

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LinearPlan:
    """The weight plan with its kernel loaded: what `choose_method` gives each layer."""

    pack: bool = False  # prepack dense bf16 weights for oneDNN (CPUs with native bf16)
    tiles: bool = False  # dense bf16 weights through our AMX tile kernel instead (CPUs with AMX)
    int4: bool = False  # quantization "int4": Q4_0/Q4_1 projections in torch's int4 layout
    kernel: BlockKernel | None = None  # projections read a GGUF's blocks through this kernel
    dense_copy: bool = True  # with a kernel: keep the dense weights for larger batches and prompts
    embedding_blocks: bool = False  # the token embedding looks its rows up in the file's blocks too


@dataclass(frozen=True, slots=True)
class LinearSetup:
    weights: WeightPlan
    plan: LinearPlan
    blocks: GGUFBlocks | None  # the file's blocks, where the plan reads any


def file_types(path: Path) -> frozenset[str] | None:
    """A GGUF's tensor types, from its header (None: not a GGUF)."""
    return GGUFFile(path).tensor_types() if path.is_file() else None


def cpu_facts(device: torch.device, kernels: CpuKernelConfig) -> CpuFacts:
    if device.type == "cpu":
        return probe_cpu(kernels)
    auto = resolve_dtype("auto", device)
    return CpuFacts(kind=device.type, auto_dtype=str(auto).removeprefix("torch."))


def plan_linears(
    path: Path,
    *,
    device: torch.device,
    dtype: str,
    quantization: str,
    kernels: CpuKernelConfig,
    num_heads: int,
    num_kv_heads: int,
) -> LinearSetup:
    """`dtype` as configured ("auto" allowed): the same inputs `mooncake check` plans with."""
    cpu = cpu_facts(device, kernels)
    weights = plan_weights(
        cpu=cpu,
        dtype=dtype,
        quantization=quantization,
        kernels=kernels,
        file_types=file_types(path),
    )
    if quantization == "int4":
        _check_int4(path, device, weights.dtype)
    cache, compiler = kernel_cache(kernels), kernels.kernel_compiler
    kernel: BlockKernel | None = None
    if weights.blocks is not None:
        report(KERNELS)  # the first load compiles them (minutes on a slow machine), later ones check them
    if weights.blocks == "avx512":  # the handle probe_cpu checked (one per process and setting)
        kernel = load_kernel(
            cache,
            amx=kernels.gguf_amx_decode,
            activations=kernels.kquant_activations,
            compiler=compiler,
            tiles=kernels.cpu_isa == "auto",
        )
    elif weights.blocks == "avx2":
        activations = activations_for(kernels.kquant_activations, file_types(path))
        kernel = load_avx2_kernel(cache, activations=activations, compiler=compiler)
    plan = LinearPlan(
        pack=weights.pack,
        tiles=weights.tiles,
        int4=quantization == "int4",
        kernel=kernel,
        dense_copy=weights.dense_copy,
        embedding_blocks=weights.embedding_lookup,
    )
    activations_label = ""
    if isinstance(kernel, Avx2Kernel):
        activations_label = f"; activations: {'14-bit' if kernel.wide else 'int8'}"
    logger.info("CPU path: %s; weights: %s%s", cpu.path, weights.label, activations_label)
    blocks = None
    if path.is_file() and (plan.int4 or kernel is not None):
        blocks = read_blocks(path, num_heads=num_heads, num_kv_heads=num_kv_heads)
    return LinearSetup(weights, plan, blocks)


def use_linear_methods(model: DecoderForCausalLM, setup: LinearSetup, path: Path) -> None:
    """One LinearMethod per layer, from the plan and the file's blocks."""
    plan = setup.plan
    counts = give_methods(model, plan, setup.blocks)
    if plan.int4 and counts["int4"] == 0:
        raise ValueError(f"{path.name} has no Q4_0 or Q4_1 projections to keep 4-bit")
    rows = ""
    if isinstance(plan.kernel, Avx512Kernel):
        rows = f"; gguf-decode up to {plan.kernel.max_rows} rows"
    logger.info("Linear methods: %s%s", ", ".join(f"{n} {name}" for name, n in sorted(counts.items())), rows)


def give_methods(
    model: DecoderForCausalLM, plan: LinearPlan, blocks: GGUFBlocks | None = None
) -> Counter[str]:
    """Give every projection and a tied head its LinearMethod, and the embedding its lookup where the plan
    has one (call once, after the weights are loaded); returns how many took each method, by name."""
    counts: Counter[str] = Counter()
    for module, stacked in projection_blocks(model, blocks.linears if blocks is not None else {}):
        if not isinstance(module.method, GGUFBlocksMethod):  # (those were loaded as blocks alone)
            module.use(choose_method(module.weight.detach(), stacked, plan))
        counts[module.method.name] += 1
    embedding = blocks.embedding if blocks is not None else None
    embed_tokens = model.model.embed_tokens
    tied = model.lm_head is None
    if tied:
        shards = [embedding] if embedding is not None else None
        model.tied_head = choose_method(embed_tokens.weight.detach(), shards, plan)
        counts[model.tied_head.name] += 1
    if plan.embedding_blocks and embedding is not None and eligible(embedding):
        head = model.tied_head if tied else None
        if tied and isinstance(head, GGUFBlocksMethod) and len(head.parts) == 1:
            # A tied head's blocks, shared: the dense table goes for both.
            embed_tokens.use_lookup(BlockEmbedding(head.parts[0], shared=True))
            counts["embedding-blocks"] += 1
        elif not tied:
            embed_tokens.use_lookup(BlockEmbedding(decode_weight(embedding), shared=False))
            counts["embedding-blocks"] += 1
    return counts


def projection_blocks(
    model: DecoderForCausalLM, blocks: dict[str, BlockMatrix]
) -> Iterator[tuple[Linear, list[BlockMatrix] | None]]:
    """Each projection, with its checkpoint weights' blocks (all shards of a fused one, stacked in the
    fused order) where `blocks` has every one of them."""
    shards_of: dict[str, list[str]] = {}
    for fused, original, _ in model.stacked_params:
        shards_of.setdefault(fused, []).append(original)
    for name, module in model.named_modules():
        if not isinstance(module, Linear):
            continue
        parent, _, attr = name.rpartition(".")
        prefix = f"{parent}." if parent else ""
        sources = [f"{prefix}{original}.weight" for original in shards_of.get(attr, [attr])]
        if all(source in blocks for source in sources):
            yield module, [blocks[source] for source in sources]
        else:
            yield module, None


def choose_method(
    dense: torch.Tensor, shards: Sequence[BlockMatrix] | None, plan: LinearPlan
) -> LinearMethod:
    """The method for a layer whose loaded dense weight is `dense` and whose blocks in the file (if the
    file has all of them in types we read) are `shards`, stacked row-wise in the layer's order (one for an
    unfused layer). Call before the dense weight is dropped."""
    if shards:
        shape = (sum(s.shape[0] for s in shards), shards[0].shape[1])
        if shape != tuple(dense.shape):
            raise ValueError(f"blocks of shape {shape} for a linear of shape {tuple(dense.shape)}")
    q4 = [s for s in shards or () if isinstance(s, Q4Blocks)]
    if plan.int4 and q4 and len(q4) == len(shards or ()):
        return Int4Method(pack_int4(Q4Blocks.stack(q4)))
    # Only where the blocks are bit for bit the dense weights: decoding through them changes speed, never
    # outputs (the batch path that replaces a dropped dense copy sums in its own fixed order).
    if plan.kernel is not None and shards and all(map(eligible, shards)) and matches(shards, dense):
        if plan.dense_copy:
            return GGUFDecodeMethod(decode_weights(shards), plan.kernel, _dense_method(dense, plan))
        return GGUFBlocksMethod(decode_weights(shards), plan.kernel)
    return _dense_method(dense, plan)


def _dense_method(dense: torch.Tensor, plan: LinearPlan) -> LinearMethod:
    if plan.tiles:
        return TileMethod(pack_tiles(dense))
    if plan.pack:
        return PackedMethod(pack_weight(dense))
    return DENSE


def _check_int4(path: Path, device: torch.device, dtype: str) -> None:
    if not path.is_file():
        raise ValueError("quantization 'int4' needs a .gguf model file")
    if device.type != "cpu" or dtype != "bfloat16" or not int4_supported():
        raise ValueError(
            "quantization 'int4' runs on CPU in bfloat16 (dtype auto on an AMX/AVX512-BF16 CPU, or bfloat16)"
        )
