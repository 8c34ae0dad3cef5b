"""Small bf16 decode batches read a GGUF's Q4 blocks, expanded to the model's own bf16 weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from inference import EngineConfig, SamplingParams
from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.loader.load import LoadedModel, load_from_config, load_model
from inference.models.loader.source import default_gguf_path
from inference.models.quantization.amx_tiles import TileMethod, cpu_has_amx
from inference.models.quantization.base import DENSE
from inference.models.quantization.gguf.avx512 import Avx512Kernel, load_kernel
from inference.models.quantization.gguf.formats import GROUP, Q4Blocks, Q8Blocks, read_blocks
from inference.models.quantization.gguf.layout import DecodeWeight, decode_weight, eligible
from inference.models.quantization.gguf.match import matches
from inference.models.quantization.gguf.method import GGUFDecodeMethod
from inference.models.quantization.onednn import PackedMethod, packing_supported
from tests.inference.real_model import MAX_TOKENS, make_engine, prompts, worst_gap_to_fp32

CPU_SUPPORTED = kernel_build.cpu_supported()
needs_kernel = pytest.mark.skipif(not CPU_SUPPORTED, reason="the Q4 decode kernel needs AVX512-BF16")
# Where the CPU has AMX, bf16 linears past the kernel's rows take our tile kernel; elsewhere oneDNN's.
DENSE_BF16_METHOD = TileMethod if cpu_has_amx() else PackedMethod


def gguf_like_blocks(out_features: int, in_features: int, seed: int) -> Q4Blocks:
    """Levels with fp16-representable scales and minimums, as a GGUF stores them."""
    rng = np.random.default_rng(seed)
    groups = in_features // GROUP
    return Q4Blocks.from_levels(
        rng.integers(0, 16, (out_features, in_features), dtype=np.uint8),
        rng.uniform(0.001, 0.03, (out_features, groups)).astype(np.float16).astype(np.float32),
        rng.normal(0, 0.1, (out_features, groups)).astype(np.float16).astype(np.float32),
    )


def gguf_like_q8(out_features: int, in_features: int, seed: int) -> Q8Blocks:
    rng = np.random.default_rng(seed)
    return Q8Blocks(
        rng.integers(-128, 128, (out_features, in_features), dtype=np.int8),
        rng.uniform(0.0005, 0.01, (out_features, in_features // GROUP)).astype(np.float16).astype(np.float32),
    )


BLOCKS = {"q4": gguf_like_blocks, "q8": gguf_like_q8}


def dense_bf16(blocks: Q4Blocks | Q8Blocks) -> torch.Tensor:
    return torch.from_numpy(blocks.dequantize()).to(torch.bfloat16)


@pytest.fixture(scope="module")
def kernel(test_cache_dir: Path) -> Avx512Kernel:
    loaded = load_kernel(test_cache_dir)
    assert loaded is not None
    return loaded


def test_the_kernel_builds_wherever_the_cpu_can_run_it(test_cache_dir: Path) -> None:
    """A missing compiler must fail here, not turn into a silent fallback on a capable CPU."""
    assert (load_kernel(test_cache_dir) is not None) == CPU_SUPPORTED


@needs_kernel
@pytest.mark.parametrize("kind", sorted(BLOCKS))
def test_one_hot_rows_read_every_weight_bit_for_bit(kernel: Avx512Kernel, kind: str) -> None:
    """Nibble order, block pairs, the path this CPU takes (AMX tiles at every row count where it has them,
    else registers) and the ragged last row group: x = e_k returns column k of bf16(d * q + m)."""
    blocks = BLOCKS[kind](37, 192, 0)
    weight, dense = decode_weight(blocks), dense_bf16(blocks)
    for rows in sorted({1, 2, 3, 4, kernel.max_rows}):
        for start in range(0, 192, rows):
            columns = [c % 192 for c in range(start, start + rows)]
            one_hot = torch.zeros(rows, 192, dtype=torch.bfloat16)
            one_hot[range(rows), columns] = 1
            assert torch.equal(kernel.linear(one_hot, weight, None), dense[:, columns].T), f"{rows} rows"


@needs_kernel
@pytest.mark.parametrize("kind", sorted(BLOCKS))
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 6, 8, 9, 16])
def test_the_product_is_the_bf16_linears_up_to_accumulation_order(
    kernel: Avx512Kernel, kind: str, rows: int
) -> None:
    if rows > kernel.max_rows:
        pytest.skip("more rows than the kernel takes")
    blocks = BLOCKS[kind](130, 576, rows)
    dense = dense_bf16(blocks)
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 576, generator=gen).bfloat16()
    bias = torch.randn(130, generator=gen).bfloat16()
    out = kernel.linear(x, decode_weight(blocks), bias)
    assert out.dtype == torch.bfloat16 and out.shape == (rows, 130)
    exact = x.float() @ dense.float().T + bias.float()
    # One rounding to bf16 at the end, as F.linear: within half a bf16 step of the fp32 product.
    assert torch.all((out.float() - exact).abs() <= exact.abs() * 2**-8 + 1e-6)
    differing = (out != F.linear(x, dense, bias)).float().mean().item()
    assert differing < 0.02, f"{differing:.1%} of outputs differ from bf16 F.linear"


@needs_kernel
def test_without_amx_the_register_path_takes_up_to_sixteen_rows(test_cache_dir: Path) -> None:
    """q4_amx off (as on an AVX512-BF16 CPU without AMX): 3 to 16 rows go through registers (groups of 8,
    4 and the rest), in the same process as a kernel handle that may use the tiles."""
    registers = load_kernel(test_cache_dir, amx=False)
    assert registers is not None and not registers.amx and registers.max_rows == 16
    for kind, make in sorted(BLOCKS.items()):
        blocks = make(21, 128, 5)
        weight, dense = decode_weight(blocks), dense_bf16(blocks)
        for rows in (3, 4, 5, 7, 8, 13, 16):
            one_hot = torch.eye(128, dtype=torch.bfloat16)[:rows]
            assert torch.equal(registers.linear(one_hot, weight, None), dense[:, :rows].T), kind
        with pytest.raises(RuntimeError, match="1 to 16 rows"):
            registers.linear(torch.zeros(17, 128, dtype=torch.bfloat16), weight, None)


@needs_kernel
@pytest.mark.parametrize("amx", [True, False], ids=["tiles", "registers"])
@pytest.mark.parametrize("kind", sorted(BLOCKS))
def test_a_rows_bits_do_not_depend_on_how_many_rows_share_its_call(
    test_cache_dir: Path, amx: bool, kind: str
) -> None:
    """One path serves every row count (1-16) of each handle, and each (weight row, activation row) sum runs
    alike whatever the call holds: any slice of 16 rows, as a call of its own, gives the bits those rows
    get in the 16-row call."""
    if amx and not cpu_has_amx():
        pytest.skip("this CPU has no AMX: the tile path cannot run (the register path is checked here)")
    kernel = load_kernel(test_cache_dir, amx=amx)
    assert kernel is not None and kernel.amx == amx
    blocks = BLOCKS[kind](70, 576, 7)
    weight = decode_weight(blocks)
    x = torch.randn(16, 576, generator=torch.Generator().manual_seed(7)).bfloat16()
    bias = torch.randn(70, generator=torch.Generator().manual_seed(8)).bfloat16()
    full = kernel.linear(x, weight, bias)
    for rows in range(1, 17):
        for start in sorted({0, 16 - rows, (16 - rows) // 2}):
            part = kernel.linear(x[start : start + rows], weight, bias)
            assert torch.equal(part, full[start : start + rows]), f"{rows} rows from {start}"
    if amx:  # the process was granted the tile state, so the calls above took the tiles, not registers
        assert torch.ops.mooncake_avx512.amx_available()


@needs_kernel
def test_the_kernel_refuses_what_it_cannot_multiply(kernel: Avx512Kernel) -> None:
    blocks = gguf_like_blocks(8, 128, seed=1)
    weight = decode_weight(blocks)
    with pytest.raises(RuntimeError, match=f"1 to {kernel.max_rows} rows"):
        kernel.linear(torch.zeros(kernel.max_rows + 1, 128, dtype=torch.bfloat16), weight, None)
    with pytest.raises(RuntimeError, match="bf16"):
        kernel.linear(torch.zeros(1, 128), weight, None)


def test_the_kernel_takes_the_files_nibbles_as_they_are() -> None:
    """No unpack-and-repack: the kernel's Q4 levels are the very bytes the blocks hold, as ggml packs them."""
    blocks = gguf_like_blocks(8, 128, seed=4)
    assert np.shares_memory(decode_weight(blocks).levels.numpy(), blocks.nibbles)
    levels = blocks.unpack_levels()
    assert levels.shape == (8, 128) and np.array_equal(blocks.nibbles[:, :16] & 0x0F, levels[:, :16])
    assert np.array_equal(blocks.nibbles[:, :16] >> 4, levels[:, 16:32])  # a block's second 16: high nibbles


def test_the_default_gguf_q8_embedding_is_read_exactly(default_model_dir: Path) -> None:
    """The tied head's Q8_0 blocks reproduce the dequantized cache (which gguf-py wrote) bit for bit."""
    from safetensors import safe_open

    read = read_blocks(default_gguf_path(), num_heads=9, num_kv_heads=3)
    blocks = read.embedding
    assert isinstance(blocks, Q8Blocks) and blocks.levels.shape == (49152, 576)
    with safe_open(str(default_model_dir / "model.safetensors"), framework="np") as f:
        np.testing.assert_array_equal(blocks.dequantize(), f.get_tensor("model.embed_tokens.weight"))
    assert "model.embed_tokens.weight" not in read.linears  # Q8_0 is not a 4-bit linear


def test_only_exact_block_pairs_are_taken() -> None:
    blocks = gguf_like_blocks(8, 128, seed=2)
    dense = dense_bf16(blocks)
    assert eligible(blocks) and not eligible(gguf_like_blocks(8, 96, seed=2))
    assert matches([blocks], dense)
    off_by_one_step = dense.clone()
    off_by_one_step.view(torch.int16)[3, 5] += 1
    assert not matches([blocks], off_by_one_step)
    exact = torch.from_numpy(blocks.dequantize())  # an fp32 model's weights (quantization/gguf/avx2.py)
    assert matches([blocks], exact) and not matches([blocks], exact.double())
    moved = exact.clone()
    moved[0, 5] = torch.nextafter(moved[0, 5], torch.tensor(1e9))  # rows at the start, middle and end
    assert not matches([blocks], moved)
    # The kernel keeps (d, m) in fp16, as files store them: a scale fp16 cannot hold keeps the packed path.
    blocks.scale[2, 1] = np.float32(1 / 3)
    assert not eligible(blocks)


class SpyKernel:
    """Stands in for Avx512Kernel: records the rows of each call it takes."""

    max_rows = 4

    def __init__(self, dense: torch.Tensor) -> None:
        self.dense, self.calls = dense, list[int]()

    def linear(self, x: torch.Tensor, weight: DecodeWeight, bias: torch.Tensor | None) -> torch.Tensor:
        self.calls.append(x.numel() // x.shape[-1])
        return F.linear(x, self.dense)


def test_a_linear_reads_its_blocks_only_for_small_batches() -> None:
    blocks = gguf_like_blocks(64, 128, seed=3)
    linear = Linear(128, 64, bias=False).bfloat16()
    linear.weight.data.copy_(dense_bf16(blocks))
    spy = SpyKernel(linear.weight.detach().clone())
    linear.use(GGUFDecodeMethod([decode_weight(blocks)], spy, DENSE))  # type: ignore[arg-type]
    assert linear.weight.numel() == 64 * 128  # a dense fallback keeps the dense weight
    linear(torch.randn(2, 2, 128).bfloat16())
    larger = torch.randn(5, 128).bfloat16()
    assert torch.equal(linear(larger), F.linear(larger, spy.dense))  # 5 rows: the fallback
    assert spy.calls == [4]


@pytest.fixture(scope="module")
def bf16_from_gguf(test_cache_dir: Path) -> LoadedModel:
    return load_model("default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)


@needs_kernel
@pytest.mark.slow
@pytest.mark.parametrize("num_seqs", [1, 8])
@torch.inference_mode()
def test_the_default_model_in_bf16_decodes_small_batches_from_its_q4_blocks(
    bf16_from_gguf: LoadedModel, hf_reference: torch.nn.Module, num_seqs: int
) -> None:
    """Every projection's bf16 weight is its Q4_1 block's values (checked bit for bit at load), and greedy
    picks of one stream and of eight stay on what fp32 ranks first, as the dense bf16 path's do (measured
    worst: 0.160 either way, at 1, 3, 8 and 16 sequences)."""
    methods = [m.method for m in bf16_from_gguf.model.modules() if isinstance(m, Linear)]
    assert len(methods) == 30 * 4 and all(isinstance(m, GGUFDecodeMethod) for m in methods)
    # Batches up to 16 rows read the blocks; larger ones the dense bf16 weights where the model keeps them
    # (by default only without AMX), else the blocks' batch path.
    fallback = (type(None),) if cpu_has_amx() else (DENSE_BF16_METHOD,)
    assert all(isinstance(m, GGUFDecodeMethod) and isinstance(m.fallback, fallback) for m in methods)
    assert all(isinstance(m, GGUFDecodeMethod) and m.kernel.max_rows == 16 for m in methods)
    head = bf16_from_gguf.model.tied_head
    assert isinstance(head, GGUFDecodeMethod)  # the tied head, from its Q8_0 embedding
    all_prompts = prompts(bf16_from_gguf.tokenizer)
    engine = make_engine(bf16_from_gguf, dtype="bfloat16", max_num_seqs=num_seqs)
    outputs = engine.generate(all_prompts, SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
    worst = worst_gap_to_fp32(hf_reference, all_prompts, outputs)
    assert worst < 0.25, f"a pick {worst:.3f} below fp32's top"


def test_fp32_and_folders_never_take_the_path(default_loaded: LoadedModel) -> None:
    """The fp32 oracle model (loaded from the converted folder) has no 4-bit copies."""
    methods = [m.method for m in default_loaded.model.modules() if isinstance(m, Linear)]
    assert methods and all(m is DENSE for m in methods)


@needs_kernel
def test_the_config_turns_the_path_off_or_keeps_it_off_amx(test_cache_dir: Path) -> None:
    """EngineConfig.q4_decode off: every linear dense bf16 (tiles or packed); q4_amx off: registers alone,
    up to 16 rows."""
    config = EngineConfig(dtype="bfloat16", device="cpu", cache_dir=str(test_cache_dir), gguf_kernels=False)
    off = load_from_config(config).model
    assert not any(isinstance(getattr(m, "method", None), GGUFDecodeMethod) for m in off.modules())
    assert isinstance(off.tied_head, DENSE_BF16_METHOD) == packing_supported(torch.bfloat16)
    config = EngineConfig(
        dtype="bfloat16", device="cpu", cache_dir=str(test_cache_dir), gguf_amx_decode=False
    )
    head = load_from_config(config).model.tied_head
    assert isinstance(head, GGUFDecodeMethod) and not head.kernel.amx and head.kernel.max_rows == 16
