"""Dense bf16 linears through our AMX tile kernel: an fp32 product within one bf16 rounding, and each row's
bits independent of how many rows share its call; the loader picks it wherever the CPU has AMX."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inference.models.layers.linear import Linear
from inference.models.loader.load import load_model
from inference.models.quantization.amx_tiles import (
    TileMethod,
    cpu_has_amx,
    load_tiles,
    pack_tiles,
    tile_linear,
)
from inference.models.quantization.gguf.method import GGUFBlocksMethod, GGUFDecodeMethod
from inference.models.quantization.setup import LinearPlan, choose_method

pytestmark = pytest.mark.skipif(
    not cpu_has_amx(),
    reason="the tile kernel needs AMX; without it bf16 linears stay on oneDNN, whose rows test_onednn checks",
)


@pytest.fixture(scope="module", autouse=True)
def native_library(test_cache_dir: Path) -> None:
    assert load_tiles(test_cache_dir)  # an AMX CPU must get the tiles: no silent fallback


def random_linear(out_features: int, in_features: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(out_features, in_features, generator=gen).bfloat16(),
        torch.randn(out_features, generator=gen).bfloat16(),
    )


# Every edge of the tiling: one weight tile, a ragged last weight tile, an odd number of weight tiles, a
# reduction shorter than, not a multiple of, and several K blocks; the model's own shapes.
SHAPES = [(1, 32), (17, 64), (70, 100), (48, 576), (200, 96), (960, 576), (576, 1536)]


@pytest.mark.parametrize(("out_features", "in_features"), SHAPES)
@pytest.mark.parametrize("with_bias", [True, False])
def test_the_product_is_fp32_within_one_bf16_rounding(
    out_features: int, in_features: int, with_bias: bool
) -> None:
    weight, bias = random_linear(out_features, in_features, seed=out_features)
    b = bias if with_bias else None
    x = torch.randn(45, in_features, generator=torch.Generator().manual_seed(1)).bfloat16()
    out = tile_linear(x, pack_tiles(weight), b)
    assert out.dtype == torch.bfloat16 and out.shape == (45, out_features)
    exact = x.float() @ weight.float().T + (bias.float() if with_bias else 0)
    # fp32 sums in another order, then one rounding: within a bf16 step of the fp32 product (a wrong tile,
    # pair or row would be off by whole values).
    assert torch.all((out.float() - exact).abs() <= exact.abs() * 2**-7 + 1e-3)


@pytest.mark.parametrize(("out_features", "in_features"), [(70, 100), (960, 576), (200, 1536)])
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it(out_features: int, in_features: int) -> None:
    """1 to 64 rows (and a prompt's 300), cut anywhere: each row equals itself in the 300-row call."""
    weight, bias = random_linear(out_features, in_features, seed=3)
    tiles = pack_tiles(weight)
    x = torch.randn(300, in_features, generator=torch.Generator().manual_seed(4)).bfloat16()
    whole = tile_linear(x, tiles, bias)
    for rows in range(1, 65):
        for start in sorted({0, 17, 300 - rows}):
            part = tile_linear(x[start : start + rows], tiles, bias)
            assert torch.equal(part, whole[start : start + rows]), f"{rows} rows from {start}"
    shaped = tile_linear(x[:60].view(3, 20, in_features), tiles, bias)
    assert torch.equal(shaped.view(60, out_features), whole[:60])


def test_bad_inputs_are_refused() -> None:
    weight, _ = random_linear(40, 64, seed=5)
    tiles = pack_tiles(weight)
    with pytest.raises(RuntimeError, match="weight must be 2-D bf16"):
        pack_tiles(weight.float())
    with pytest.raises(RuntimeError, match="x must be 2-D bf16"):
        torch.ops.mooncake_avx512.tile_linear(torch.zeros(2, 64), tiles.packed, 40, None)
    with pytest.raises(RuntimeError, match="does not match the packed weight"):
        torch.ops.mooncake_avx512.tile_linear(
            torch.zeros(2, 96, dtype=torch.bfloat16), tiles.packed, 40, None
        )
    with pytest.raises(RuntimeError, match="does not match the packed weight"):
        torch.ops.mooncake_avx512.tile_linear(
            torch.zeros(2, 64, dtype=torch.bfloat16), tiles.packed, 80, None
        )
    with pytest.raises(RuntimeError, match="bias must have n values"):
        tile_linear(torch.zeros(2, 64, dtype=torch.bfloat16), tiles, torch.zeros(7, dtype=torch.bfloat16))


def test_a_tiled_linear_drops_the_dense_weight_and_counts_its_copy() -> None:
    layer = Linear(100, 40, bias=True).bfloat16()
    x = torch.randn(5, 100).bfloat16()
    dense = layer(x)
    layer.use(choose_method(layer.weight.detach(), None, LinearPlan(pack=True, tiles=True)))
    assert layer.weight.numel() == 0 and isinstance(layer.method, TileMethod)
    assert layer.method.nbytes() == 3 * 4 * 16 * 32 * 2  # 40 -> 48 rows, 100 -> 128 columns, bf16
    assert torch.allclose(layer(x).float(), dense.float(), rtol=2**-7, atol=1e-2)


def test_bf16_models_take_the_tiles_on_amx(
    tiny_model_dir: Callable[[str], Path], test_cache_dir: Path
) -> None:
    """A bf16 folder model's linears tile, and so do the default GGUF's fallbacks past its Q4 kernel's rows
    where it keeps a dense copy (gguf_dense_copy; by default there is none on AMX: the blocks' own batch
    path takes those rows)."""
    folder = load_model(str(tiny_model_dir("llama-rope-linear-bias")), dtype="bfloat16", device="cpu")
    linears = [m.method for m in folder.model.modules() if isinstance(m, Linear)]
    assert linears and all(isinstance(m, TileMethod) for m in linears)
    gguf = load_model(
        "default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir, gguf_dense_copy=True
    )
    methods = [m.method for m in gguf.model.modules() if isinstance(m, Linear)] + [gguf.model.tied_head]
    assert all(isinstance(m, GGUFDecodeMethod) and isinstance(m.fallback, TileMethod) for m in methods)
    one_copy = load_model("default", dtype="bfloat16", device="cpu", cache_dir=test_cache_dir)
    methods = [m.method for m in one_copy.model.modules() if isinstance(m, Linear)]
    assert all(isinstance(m, GGUFBlocksMethod) and m.fallback is None for m in methods)
