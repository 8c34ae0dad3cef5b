"""ModelRunner sizing: KV budget -> blocks, max_model_len resolution and its errors, input validation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from inference import LLMEngine, SamplingParams
from inference.config import EngineConfig
from inference.core.model_io import ScheduledChunk
from inference.core.model_runner import ModelRunner
from inference.models.layers.kv_budget import KVBudget, max_model_len_error
from inference.models.loader.load import LoadedModel, load_model

# tiny qwen2: 2 layers x 2 KV heads x head_dim 16, fp32 -> 2 * 2 * 16 * 2 * 16 * 4 bytes per 16-token block
PER_BLOCK = 8192


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Callable[[str], Path]) -> LoadedModel:
    return load_model(str(tiny_model_dir("qwen2")), dtype="float32", device="cpu")


def runner(loaded: LoadedModel, **overrides: object) -> ModelRunner:
    options: dict[str, object] = {
        "block_size": 16,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 256,
        "max_model_len": None,
        "kv_cache_memory_bytes": 1 << 20,
        "gpu_memory_utilization": 0.9,
    }
    options.update(overrides)
    return ModelRunner(loaded, **options)  # type: ignore[arg-type]


def test_kv_budget_sets_num_blocks(tiny: LoadedModel) -> None:
    r = runner(tiny, kv_cache_memory_bytes=(1 << 20) + 100)
    assert r.num_blocks == (1 << 20) // PER_BLOCK == 128
    assert r.kv_capacity_tokens == 128 * 16
    assert r.kv_cache_bytes == 128 * PER_BLOCK
    assert r.attention_backend_name == "torch"
    assert r.device == torch.device("cpu") and r.vocab_size == 512


def test_max_model_len_defaults_to_what_the_cache_holds(
    tiny: LoadedModel, caplog: pytest.LogCaptureFixture
) -> None:
    assert tiny.context_length == 32768
    with caplog.at_level("INFO", logger="inference.core.model_runner"):
        r = runner(tiny)
    assert r.max_model_len == 2048
    assert "max_model_len: 2048" in caplog.text and "KV cache size: 2048 tokens" in caplog.text


def test_max_model_len_capped_by_the_model_context(tiny: LoadedModel) -> None:
    assert runner(tiny, kv_cache_memory_bytes=512 << 20).max_model_len == 32768


def test_max_model_len_that_cannot_fit_names_the_fix(tiny: LoadedModel) -> None:
    with pytest.raises(ValueError) as err:
        runner(tiny, max_model_len=4096)
    message = str(err.value)
    assert "largest max_model_len that fits is 2048" in message
    assert f"kv_cache_memory_bytes to at least {256 * PER_BLOCK}" in message


def test_max_model_len_beyond_the_model_context(tiny: LoadedModel) -> None:
    with pytest.raises(ValueError, match="exceeds the model's context length 32768"):
        runner(tiny, max_model_len=40000, kv_cache_memory_bytes=1 << 30)


def test_default_cpu_budget_is_one_full_context_plus_a_share_per_other_sequence(
    tiny: LoadedModel, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="inference.core.model_runner"):
        r = runner(tiny, kv_cache_memory_bytes=None, max_model_len=1024)
    assert r.kv_capacity_tokens == 1024 + 7 * 64  # max_num_seqs 8: 7 others at 64 tokens each
    assert r.num_blocks == (1024 + 7 * 64) // 16 and r.max_model_len == 1024
    assert "(1024 + (8 - 1) x 64 = 1472 tokens)" in caplog.text and "in float32" in caplog.text


def test_budget_below_one_block(tiny: LoadedModel) -> None:
    with pytest.raises(ValueError, match="not even one KV block"):
        runner(tiny, kv_cache_memory_bytes=100)


def test_gpu_error_suggests_a_utilization() -> None:
    budget = KVBudget(1 << 30, "gpu_memory_utilization=0.50 of 8192.0 MiB", 8 << 30, 3 << 30)
    message = str(max_model_len_error(9000, capacity_tokens=4000, needed_bytes=2 << 30, budget=budget))
    assert (
        "gpu_memory_utilization to at least 0.63" in message
        and "largest max_model_len that fits is 4000" in message
    )


@pytest.mark.parametrize("backend", ["flash_attn", "bogus"])
def test_bad_attention_backend(tiny: LoadedModel, backend: str) -> None:
    with pytest.raises(ValueError, match="attention_backend"):
        runner(tiny, attention_backend=backend)


@pytest.mark.parametrize(
    "chunk",
    [
        ScheduledChunk([1, 2, 3], 0, 3, []),  # no blocks
        ScheduledChunk([1, 2, 3], 2, 2, [0]),  # past the end of the tokens
        ScheduledChunk([1, 2, 3], 0, 0, [0]),  # nothing to compute
        ScheduledChunk([1, 2, 3], 0, 3, [128]),  # block id out of range
        ScheduledChunk(list(range(20)), 0, 20, [0]),  # table too short
        # One-token chunks take the decode fast path, with the same checks:
        ScheduledChunk([1, 2, 3], 3, 1, [0]),  # past the end of the tokens
        ScheduledChunk([1, 2, 3], -1, 1, [0]),  # negative start
        ScheduledChunk(list(range(20)), 19, 1, [0]),  # table too short for the new token
        ScheduledChunk(list(range(20)), 19, 1, [0, 128]),  # its block id out of range
    ],
)
def test_invalid_chunks_are_rejected(tiny: LoadedModel, chunk: ScheduledChunk) -> None:
    with pytest.raises(ValueError, match="chunk 0"):
        runner(tiny).execute([chunk])


def test_decode_rows_past_max_model_len_are_rejected(tiny: LoadedModel) -> None:
    r = runner(tiny, max_model_len=16)
    with pytest.raises(ValueError, match="exceed max_model_len=16"):
        r.execute([ScheduledChunk(list(range(17)), 16, 1, [0, 1])])


def test_empty_step_is_rejected(tiny: LoadedModel) -> None:
    with pytest.raises(ValueError, match="at least one chunk"):
        runner(tiny).execute([])


def test_return_all_logits(tiny: LoadedModel) -> None:
    r = runner(tiny)
    out = r.execute(
        [ScheduledChunk([5, 6, 7, 8], 1, 3, [3], return_all_logits=True), ScheduledChunk([9], 0, 1, [4])]
    )
    assert out.last.shape == (2, 512) and set(out.all_positions) == {0}
    assert out.all_positions[0].shape == (3, 512) and out.all_positions[0].dtype == torch.float32


def test_release_unbinds_the_cache(tiny: LoadedModel) -> None:
    r = runner(tiny)
    attn = r.model.decoder_layers()[0].self_attn.attn
    assert attn.k_cache.shape == (128, 16, 2, 16)
    r.release()
    assert attn.k_cache.numel() == 0 and attn.v_cache.numel() == 0
    with pytest.raises(ValueError, match="block ids"):
        r.execute([ScheduledChunk([1], 0, 1, [0])])


def test_cpu_threads_follow_the_config(tiny: LoadedModel) -> None:
    before = torch.get_num_threads()
    try:
        runner(tiny, cpu_threads=1)
        assert torch.get_num_threads() == 1
        with pytest.raises(ValueError, match="cpu_threads"):
            runner(tiny, cpu_threads=0)
        with pytest.raises(ValueError, match="cpu_threads"):
            EngineConfig(cpu_threads=0)
    finally:
        torch.set_num_threads(before)


def test_the_default_cache_preempts_when_outgrown_and_answers_alike(
    tiny: LoadedModel, tiny_model_dir: Callable[[str], Path]
) -> None:
    """Four sequences of 150 tokens outgrow the default's 160 + 3 x 64 tokens: the scheduler preempts and
    recomputes, and the greedy replies equal those of a cache that holds them all."""
    prompts = [[(7 * i + j) % 500 + 3 for j in range(60)] for i in range(4)]
    params = SamplingParams(temperature=0, max_tokens=90, ignore_eos=True)
    replies = {}
    for name, budget in (("default", None), ("roomy", 1 << 20)):
        config = EngineConfig(
            model=str(tiny_model_dir("qwen2")),
            dtype="float32",
            device="cpu",
            max_model_len=160,
            max_num_seqs=4,
            kv_cache_memory_bytes=budget,
        )
        engine = LLMEngine(config, loaded=tiny)
        replies[name] = [out.outputs[0].token_ids for out in engine.generate(prompts, params)]
        preemptions = engine.stats().num_preemptions
        assert (preemptions > 0) == (name == "default"), (name, preemptions)
    assert replies["default"] == replies["roomy"]
