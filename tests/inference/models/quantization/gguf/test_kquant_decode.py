"""A GGUF's K-quant (Q4_K, Q5_K, Q6_K), IQ4_XS and Q8_0 linears read as the file stores them, held to
gguf-py's dequantization: bit for bit where a weight is read alone, within one bf16 rounding for every
product."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from inference.models.kernels import build as kernel_build
from inference.models.layers.linear import Linear
from inference.models.quantization.amx_tiles import cpu_has_amx
from inference.models.quantization.base import DENSE
from inference.models.quantization.gguf.avx512 import Avx512Kernel, load_kernel
from inference.models.quantization.gguf.formats import KQuantBlocks, Q4Blocks, Q8Blocks, parse_q8_0
from inference.models.quantization.gguf.layout import KQuantWeight, decode_weight, decode_weights, eligible
from inference.models.quantization.gguf.method import (
    GGUFBlocksMethod,
    GGUFDecodeMethod,
    blocks_for_small_batches,
)
from inference.models.quantization.setup import LinearPlan, choose_method

pytestmark = pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the kernels need AVX512-BF16")

KQUANTS = ["Q4_K", "Q5_K", "Q6_K", "IQ4_XS"]
PATHS = [pytest.param(True, id="tiles"), pytest.param(False, id="registers")]
AMX = [True, False]


@pytest.fixture(scope="module", params=PATHS)
def kernel(request: pytest.FixtureRequest, test_cache_dir: Path) -> Avx512Kernel:
    """The tile path (where this CPU has AMX) and the register path, each checked."""
    if request.param and not cpu_has_amx():
        pytest.skip("this CPU has no AMX: the tile path cannot run (the register path is checked here)")
    loaded = load_kernel(test_cache_dir, amx=request.param)
    assert loaded is not None and loaded.amx == request.param
    return loaded


def reference_bf16(blocks: KQuantBlocks | Q8Blocks) -> torch.Tensor:
    """gguf-py's own float32 dequantization, rounded once to bf16: the weights the dense model holds."""
    if isinstance(blocks, KQuantBlocks):
        raw = np.ascontiguousarray(blocks.raw)
        values = dequantize(raw, GGMLQuantizationType[blocks.type_name]).reshape(blocks.shape)
    else:
        values = blocks.dequantize()
    return torch.from_numpy(values).to(torch.bfloat16)


def q8_from_gguf_py(out_features: int, in_features: int, seed: int) -> Q8Blocks:
    """Q8_0 bytes as gguf-py writes them, parsed as a file's would be."""
    weights = np.random.default_rng(seed).normal(0, 0.05, (out_features, in_features)).astype(np.float32)
    return parse_q8_0(quantize(weights, GGMLQuantizationType.Q8_0))


@pytest.mark.parametrize("type_name", KQUANTS)
@pytest.mark.parametrize("shape", [(20, 256), (33, 768), (16, 512)])
def test_the_expansion_is_gguf_pys_dequantization_bit_for_bit(
    kernel: Avx512Kernel, type_name: str, shape: tuple[int, int]
) -> None:
    """The kernels' own expansion (kquant_dequantize) and one-hot rows through the product both return
    gguf-py's float32 weights rounded to bf16, for row counts that fill and do not fill a group of 16."""
    blocks = KQuantBlocks.random(type_name, *shape, seed=shape[0])
    expected = reference_bf16(blocks)
    expanded = torch.ops.mooncake_avx512.kquant_dequantize(
        torch.from_numpy(blocks.raw), blocks.type_id, shape[1]
    )
    assert torch.equal(expanded, expected)
    weight = decode_weight(blocks)
    assert isinstance(weight, KQuantWeight) and np.shares_memory(weight.raw.numpy(), blocks.raw)
    for rows in (1, 2, 3, 16):
        columns = torch.randperm(shape[1], generator=torch.Generator().manual_seed(rows))[:rows]
        one_hot = torch.zeros(rows, shape[1], dtype=torch.bfloat16)
        one_hot[torch.arange(rows), columns] = 1
        assert torch.equal(kernel.linear(one_hot, weight, None), expected[:, columns].T), f"{rows} rows"


@pytest.mark.parametrize("type_name", [*KQUANTS, "Q8_0"])
@pytest.mark.parametrize("rows", [1, 2, 3, 16])
def test_the_product_is_the_dequantized_linear_within_one_bf16_rounding(
    kernel: Avx512Kernel, type_name: str, rows: int
) -> None:
    if type_name == "Q8_0":
        blocks: KQuantBlocks | Q8Blocks = q8_from_gguf_py(45, 768, rows)
    else:
        blocks = KQuantBlocks.random(type_name, 45, 768, seed=rows)
    dense = reference_bf16(blocks)
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 768, generator=gen).bfloat16()
    bias = torch.randn(45, generator=gen).bfloat16()
    out = kernel.linear(x, decode_weight(blocks), bias)
    assert out.dtype == torch.bfloat16 and out.shape == (rows, 45)
    exact = x.double() @ dense.double().T + bias.double()
    # fp32 accumulation, then one rounding to bf16: within half a bf16 step of the exact product.
    assert torch.all((out.double() - exact).abs() <= exact.abs() * 2**-8 + 1e-5)
    alone = kernel.linear(x[-1:], decode_weight(blocks), bias)
    assert torch.equal(alone, out[-1:])  # a row's bits do not depend on its batch


def test_q8_0_linears_are_read_as_gguf_py_writes_them() -> None:
    weights = np.random.default_rng(3).normal(0, 0.05, (7, 96)).astype(np.float32)
    raw = quantize(weights, GGMLQuantizationType.Q8_0)
    assert raw.shape == (7, 3 * 34)
    np.testing.assert_array_equal(parse_q8_0(raw).dequantize(), dequantize(raw, GGMLQuantizationType.Q8_0))


def test_a_fused_projection_of_mixed_types_reads_each_part_as_stored(kernel: Avx512Kernel) -> None:
    """A Q4_K_M file stores Q and K as Q4_K and V as Q6_K: the fused QKV keeps one part per run of a type,
    row after row, each with its slice of the bias, and gives every row the bits its part alone gives it."""
    shards = [
        KQuantBlocks.random("Q4_K", 32, 512, seed=1),
        KQuantBlocks.random("Q4_K", 16, 512, seed=2),
        KQuantBlocks.random("Q6_K", 16, 512, seed=3),
    ]
    dense = torch.cat([reference_bf16(s) for s in shards])
    parts = decode_weights(shards)
    assert [(p.type_id, p.out_features) for p in parts if isinstance(p, KQuantWeight)] == [(12, 48), (14, 16)]
    method = choose_method(dense, shards, LinearPlan(kernel=kernel))
    assert isinstance(method, GGUFDecodeMethod) and len(method.parts) == 2
    linear = Linear(512, 64, bias=True).bfloat16()
    linear.weight.data.copy_(dense)
    linear.use(method)
    x = torch.randn(3, 512, generator=torch.Generator().manual_seed(0)).bfloat16()
    out = linear(x)
    bias = linear.bias.detach()
    assert torch.equal(out[:, 48:], kernel.linear(x, parts[1], bias[48:]))
    assert torch.equal(out[:, :48], kernel.linear(x, parts[0], bias[:48]))
    large = torch.randn(kernel.max_rows + 1, 512).bfloat16()
    assert torch.equal(linear(large), F.linear(large, dense, bias))  # past the kernel's rows: the dense path


def test_only_whole_super_blocks_with_the_dense_weights_bits_are_taken(kernel: Avx512Kernel) -> None:
    blocks = KQuantBlocks.random("Q4_K", 8, 256, seed=5)
    assert eligible(blocks)
    dense = reference_bf16(blocks)
    assert isinstance(choose_method(dense, [blocks], LinearPlan(kernel=kernel)), GGUFDecodeMethod)
    off_by_one_step = dense.clone()
    off_by_one_step.view(torch.int16)[1, 200] += 1
    assert choose_method(off_by_one_step, [blocks], LinearPlan(kernel=kernel)) is DENSE
    with pytest.raises(ValueError, match="blocks of shape"):
        choose_method(dense[:4], [blocks], LinearPlan(kernel=kernel))


def test_the_kernel_refuses_rows_that_do_not_hold_whole_super_blocks(kernel: Avx512Kernel) -> None:
    blocks = KQuantBlocks.random("Q6_K", 4, 512, seed=6)
    x = torch.zeros(1, 256, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="do not hold 256 weights"):
        torch.ops.mooncake_avx512.kquant_linear(
            x, torch.from_numpy(blocks.raw), blocks.type_id, None, kernel.amx
        )
    with pytest.raises(RuntimeError, match="not a K-quant type"):
        torch.ops.mooncake_avx512.kquant_dequantize(torch.from_numpy(blocks.raw), 2, 512)


def batch_op(x: torch.Tensor, blocks: KQuantBlocks | Q4Blocks, *, amx: bool) -> torch.Tensor:
    """The batch path (any row count) with tiles allowed or not, whatever this CPU has."""
    weight = decode_weight(blocks)
    if isinstance(weight, KQuantWeight):
        return torch.ops.mooncake_avx512.kquant_linear(x, weight.raw, weight.type_id, None, amx, True)
    return torch.ops.mooncake_avx512.block_linear(x, weight.levels, weight.dm, None, amx, True)


def q4_1(out_features: int, in_features: int, seed: int) -> Q4Blocks:
    rng = np.random.default_rng(seed)
    groups = in_features // 32
    return Q4Blocks.from_levels(
        rng.integers(0, 16, (out_features, in_features), dtype=np.uint8),
        rng.uniform(0.001, 0.03, (out_features, groups)).astype(np.float16).astype(np.float32),
        rng.normal(0, 0.1, (out_features, groups)).astype(np.float16).astype(np.float32),
    )


@pytest.mark.parametrize("amx", AMX, ids=["tiles", "registers"])
@pytest.mark.parametrize("type_name", ["Q4_K", "Q6_K", "IQ4_XS", "Q4_1"])
def test_the_batch_path_takes_any_row_count_and_a_rows_bits_never_depend_on_it(
    amx: bool, type_name: str
) -> None:
    """Prompt chunks and batches past 16 rows read the blocks too (no dense copy): 1 to 100 rows, each row
    within one bf16 rounding of the exact product and with the bits it gets in a call of its own, so a
    prompt's logits do not depend on how it was cut into chunks."""
    if amx and not cpu_has_amx():
        pytest.skip("this CPU has no AMX: the tile path cannot run (the register path is checked here)")
    blocks = q4_1(70, 512, seed=2) if type_name == "Q4_1" else KQuantBlocks.random(type_name, 70, 512, seed=2)
    dense = torch.from_numpy(blocks.dequantize()).bfloat16()
    x = torch.randn(100, 512, generator=torch.Generator().manual_seed(3)).bfloat16()
    full = batch_op(x, blocks, amx=amx)
    exact = x.double() @ dense.double().T
    assert torch.all((full.double() - exact).abs() <= exact.abs() * 2**-8 + 1e-5)
    for start, rows in [(0, 1), (5, 1), (0, 16), (16, 17), (40, 33), (99, 1), (3, 64)]:
        assert torch.equal(batch_op(x[start : start + rows], blocks, amx=amx), full[start : start + rows])


def test_without_a_dense_copy_a_layer_keeps_only_its_blocks(kernel: Avx512Kernel) -> None:
    blocks = KQuantBlocks.random("Q4_K", 48, 512, seed=7)
    dense = reference_bf16(blocks)
    linear = Linear(512, 48, bias=True).bfloat16()
    linear.weight.data.copy_(dense)
    method = choose_method(dense, [blocks], LinearPlan(kernel=kernel, dense_copy=False))
    assert isinstance(method, GGUFBlocksMethod) and not method.keeps_dense
    linear.use(method)
    assert linear.weight.numel() == 0  # the dense copy is gone: the blocks are the layer's weights
    assert method.nbytes() == blocks.raw.nbytes
    x = torch.randn(40, 512, generator=torch.Generator().manual_seed(8)).bfloat16()
    bias = linear.bias.detach()
    assert torch.equal(linear(x[:3]), kernel.linear(x[:3], method.parts[0], bias))  # decoding rows
    assert torch.equal(linear(x), kernel.batch_linear(x, method.parts[0], bias))  # past 16 rows
    with blocks_for_small_batches(False):  # a step with prompt chunks: the batch path at any row count
        assert torch.equal(linear(x[:3]), kernel.batch_linear(x[:3], method.parts[0], bias))
