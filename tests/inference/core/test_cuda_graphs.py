"""Decode steps over the graphs' fixed, padded buffers give the eager engine's tokens and write no stray KV.

Off CUDA, DecodeGraphs runs the same padded buffers eagerly (Triton's CPU interpreter), which is exactly
what a captured graph replays; the capture itself is exercised by bench/gpu_check.sh on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from inference import EngineConfig, LLMEngine, SamplingParams
from inference.core.cuda_graphs import CAPTURE_SIZES, DecodeGraphs
from inference.core.model_runner import ModelRunner
from inference.models.loader.load import LoadedModel, load_model
from tests.inference.real_model import make_engine, prompts


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Callable[[str], Path]) -> LoadedModel:
    return load_model(str(tiny_model_dir("qwen2")), dtype="float32", device="cpu")


def with_graphs(runner: ModelRunner, max_batch: int) -> DecodeGraphs:
    graphs = DecodeGraphs(
        runner.model,
        runner.backend,  # type: ignore[arg-type]
        max_batch=max_batch,
        block_size=runner.block_size,
        max_blocks_per_seq=-(-runner.max_model_len // runner.block_size),
        device=runner.device,
    )
    runner.decode_graphs = graphs
    return graphs


def greedy(engine: LLMEngine, token_ids: list[list[int]], n: int) -> list[list[int]]:
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in engine.generate(token_ids, params)]


def tiny_engine(loaded: LoadedModel, backend: str) -> LLMEngine:
    config = EngineConfig(
        model="tiny",
        dtype="float32",
        device="cpu",
        max_model_len=256,
        kv_cache_memory_bytes=1 << 20,
        max_num_seqs=8,
        attention_backend=backend,
    )
    return LLMEngine(config, loaded=loaded)


def test_capture_sizes_cover_the_batch_limit() -> None:
    assert CAPTURE_SIZES[:5] == (1, 2, 4, 8, 16) and CAPTURE_SIZES[-1] == 256


@pytest.mark.parametrize(
    ("max_batch", "sizes"), [(1, [1]), (20, [1, 2, 4, 8, 16, 20]), (999, list(CAPTURE_SIZES))]
)
def test_sizes_and_padding(tiny: LoadedModel, max_batch: int, sizes: list[int]) -> None:
    runner = tiny_engine(tiny, "triton").runner
    graphs = with_graphs(runner, max_batch)
    assert graphs.sizes == sizes
    assert graphs.padded_size(1) == 1
    assert graphs.padded_size(sizes[-1]) == sizes[-1]
    assert graphs.padded_size(sizes[-1] + 1) is None
    if max_batch == 20:
        assert [graphs.padded_size(n) for n in (3, 9, 17)] == [4, 16, 20]


def test_graph_decode_matches_eager_engine(tiny: LoadedModel) -> None:
    rng = np.random.default_rng(0)
    batch = [rng.integers(2, 500, size=n).tolist() for n in (5, 21, 40)]
    expected = greedy(tiny_engine(tiny, "torch"), batch, 6)
    engine = tiny_engine(tiny, "triton")
    graphs = with_graphs(engine.runner, 8)
    calls: list[int] = []
    run = graphs.run

    def counting_run(*args: Any) -> torch.Tensor:
        calls.append(len(args[0]))
        return run(*args)

    graphs.run = counting_run  # type: ignore[method-assign]
    assert greedy(engine, batch, 6) == expected
    assert calls and set(calls) == {3}  # every decode step went through the padded buffers (3 -> 4)


def test_padding_rows_write_no_kv(tiny: LoadedModel) -> None:
    runner = tiny_engine(tiny, "triton").runner
    graphs = with_graphs(runner, 8)
    caches = [
        (layer.self_attn.attn.k_cache, layer.self_attn.attn.v_cache)
        for layer in runner.model.decoder_layers()
    ]
    for k_cache, v_cache in caches:
        k_cache.normal_()
        v_cache.normal_()
    before = [(k.clone(), v.clone()) for k, v in caches]
    slots = np.array([16 * 3 + 4, 16 * 7, 16 * 9 + 15], dtype=np.int64)
    hidden = graphs.run(
        np.array([11, 12, 13]), np.array([4, 0, 15]), slots, [[0, 3], [7], [1, 9]], [5, 1, 16]
    )
    assert hidden.shape == (3, runner.model.args.hidden_size) and torch.isfinite(hidden).all()
    for (k, v), (k0, v0) in zip(caches, before, strict=True):
        for now, then in ((k, k0), (v, v0)):
            changed = (now != then).flatten(2).any(-1).flatten().nonzero().flatten().tolist()
            assert changed == sorted(slots.tolist())  # the padding row (slot -1) wrote nowhere


@pytest.mark.slow
def test_real_model_graph_decode_matches_torch_backend(default_loaded: LoadedModel) -> None:
    """SmolLM2 (GQA 9/3, head_dim 64) greedy through the Triton backend's padded graph path, fp32."""
    batch = [p[:40] for p in prompts(default_loaded.tokenizer)[:3]]
    expected = greedy(make_engine(default_loaded, max_model_len=128), batch, 5)
    engine = make_engine(default_loaded, max_model_len=128, attention_backend="triton")
    with_graphs(engine.runner, 4)
    assert greedy(engine, batch, 5) == expected
