"""How a model's weights are held and multiplied on its device: the one decision the load, the memory plan
(manager/footprint.py) and the console's label (manager/native_path.py) all take from here.

Pure and torch-free: it reads what the CPU's kernels passed at their checks (`CpuFacts`, probed by
quantization/probe.py), the dtype, the quantization, the CPU-kernel settings and the file's tensor types
(from a GGUF's header). Which code then computes each row of a step is written down in
docs/design/cpu-paths.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from inference.config_groups import CpuKernelConfig

# The GGUF block types our kernels read as stored: every table of them in the engine is this one.
INT4_TYPES = ("Q4_0", "Q4_1")  # what quantization "int4" keeps 4-bit
Q8_TYPES = ("Q8_0",)
KQUANT_TYPES = ("Q4_K", "Q5_K", "Q6_K", "IQ4_XS")  # super-blocks of 256 weights
BLOCK_TYPES = (*INT4_TYPES, *Q8_TYPES, *KQUANT_TYPES)

GPU_KERNELS = "GPU kernels (Triton/flash-attn)"
GGUF_BLOCKS = "GGUF blocks read as stored"
_DENSE_LABELS = {"float32": "fp32 dense", "bfloat16": "bf16 dense", "float16": "fp16 dense"}


@dataclass(frozen=True, slots=True)
class CpuFacts:
    """What the device offers, as the kernels' own checks found it (or a test states it)."""

    kind: str = "cpu"  # "cpu" or "cuda"
    auto_dtype: str = "float32"  # what dtype "auto" means here
    avx512_blocks: bool = False  # the AVX512-BF16 GGUF block kernels passed their check
    amx_tiles: bool = False  # the AMX tile linears passed theirs
    avx2_blocks: bool = False  # the AVX2 GGUF block kernels passed theirs
    onednn_packing: bool = False  # oneDNN's prepacked bf16 linears equal F.linear here

    @property
    def path(self) -> str:
        """The CPU path these facts give, as the load logs it and docs/design/cpu-paths.md names it."""
        if self.kind != "cpu":
            return self.kind
        if self.amx_tiles:
            return "AMX tiles and AVX512-BF16"
        if self.avx512_blocks:
            return "AVX512-BF16 without AMX tiles"
        if self.avx2_blocks:
            return "AVX2, fp32"
        return f"no native kernels ({'bf16' if self.auto_dtype == 'bfloat16' else 'fp32'} through torch)"


@dataclass(frozen=True, slots=True)
class WeightPlan:
    """What one model's weights are on its device, and which kernels multiply them."""

    dtype: str  # the compute dtype, "auto" resolved
    kind: str = "cpu"
    int4: bool = False  # Q4_0/Q4_1 projections in torch's int4 layout (quantization "int4")
    blocks: str | None = None  # "avx512" or "avx2": projections read the file's blocks through that kernel
    dense_copy: bool = True  # with blocks: a dense copy stays for prompts and large batches
    embedding_lookup: bool = False  # the token embedding looks its rows up in the blocks (no dense table)
    pack: bool = False  # dense bf16 weights prepacked for oneDNN
    tiles: bool = False  # dense bf16 weights through the AMX tile kernel instead

    @property
    def label(self) -> str:
        """How `mooncake check` and the console name the weights' path."""
        if self.kind == "cuda":
            return GPU_KERNELS
        if self.int4 or self.blocks is not None:
            return GGUF_BLOCKS
        return _DENSE_LABELS[self.dtype]


def resolve_dtype(dtype: str, cpu: CpuFacts) -> str:
    return cpu.auto_dtype if dtype == "auto" else dtype


def plan_weights(
    *,
    cpu: CpuFacts,
    dtype: str,
    quantization: str,
    kernels: CpuKernelConfig,
    file_types: frozenset[str] | None,
) -> WeightPlan:
    """`dtype` as configured ("auto" allowed); `file_types`: the types of a GGUF's tensors (None: not a
    GGUF). Whether int4 can run at all is the load's check (it names what is missing)."""
    resolved = resolve_dtype(dtype, cpu)
    if cpu.kind != "cpu":
        return WeightPlan(resolved, kind=cpu.kind)
    pack = resolved == "bfloat16" and cpu.onednn_packing
    tiles = pack and cpu.amx_tiles
    if quantization == "int4":
        has_int4 = file_types is not None and bool(file_types & set(INT4_TYPES))
        return WeightPlan(resolved, int4=has_int4, pack=pack, tiles=tiles)
    blocks = _block_kernel(cpu, dtype, resolved, kernels, file_types)
    if blocks is None:
        return WeightPlan(resolved, pack=pack, tiles=tiles)
    if blocks == "avx512":
        # Without AMX tiles the blocks' batch path runs in registers, several times slower than oneDNN's
        # dense kernels: keep the dense bf16 copy for prompts and large batches there.
        copy = kernels.gguf_dense_copy if kernels.gguf_dense_copy is not None else not tiles
        return WeightPlan(resolved, blocks=blocks, dense_copy=copy, pack=pack, tiles=tiles)
    # AVX2: a dense copy would be the fp32 model itself (four bytes a weight), so the blocks are the only
    # copy, and the embedding looks its rows up in them too (1 GB in fp32 for a 1B model).
    return WeightPlan(resolved, blocks=blocks, dense_copy=False, embedding_lookup=True)


def _block_kernel(
    cpu: CpuFacts,
    dtype: str,
    resolved: str,
    kernels: CpuKernelConfig,
    file_types: frozenset[str] | None,
) -> str | None:
    if not kernels.gguf_kernels or not file_types or not file_types & set(BLOCK_TYPES):
        return None
    if resolved == "bfloat16" and cpu.avx512_blocks:
        return "avx512"
    # fp32 only where the dtype was left to "auto": float32 by name keeps dense weights, whose outputs
    # match an fp32 reference token for token.
    if resolved != "float32" or dtype != "auto" or not cpu.avx2_blocks:
        return None
    # The dense copy is the fp32 model itself, so only where asked for. The bundled Q4_1 model decoded 3-4x
    # faster on its blocks (one thread, c=1; a 400-token prompt took no longer). It kept its dense
    # copy while identical greedy requests could get two answers on the blocks: torch's fp32 attention,
    # since replaced on this path by the AVX2 library's (issue 45).
    return None if kernels.gguf_dense_copy else "avx2"
