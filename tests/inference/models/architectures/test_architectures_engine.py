"""Every natively served architecture through the whole engine: greedy replies to 8 prompts submitted together
equal Hugging Face generate(do_sample=False) token for token (fp32, CPU), with prefix-cache hits, with
small prefill chunks, under forced preemption and with n-gram speculation. Tiny random checkpoints of each
real structure (tests/inference/conftest.py TINY_CONFIGS)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from inference import EngineConfig, LLMEngine, SamplingParams
from inference.models.architectures.args import ModelArgs
from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.loader.load import LoadedModel, load_model
from tests.inference.real_model import hf_greedy

MAX_TOKENS = 24
GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
# One per family (the dense Llama/Qwen ones have their engine oracle on the real model). Not Phi-3 with
# LongRoPE: its factors switch with a sequence's length, so keys cached before a prompt crosses the
# original context keep the short factors; HF generate does the same, but at its own chunk boundaries
# (test_models.py checks Phi-3's logits where both compute alike).
ARCHITECTURES = ["mistral-window", "gemma2", "gemma3", "mixtral", "qwen2-moe", "qwen3-moe", "olmoe"]


def eight_prompts(vocab: int) -> list[list[int]]:
    """Four prompts sharing a 40-token prefix (two full blocks and a half: prefix-cache hits), four apart;
    lengths 3 to 130, so some prompts outgrow a block table's first pages and a chunk budget."""
    gen = torch.Generator().manual_seed(7)

    def ids(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=gen).tolist()

    shared = ids(40)
    return [shared + ids(n) for n in (5, 17, 33, 60)] + [ids(n) for n in (3, 12, 70, 130)]


def args_of(loaded: LoadedModel) -> ModelArgs:
    return cast(DecoderForCausalLM, loaded.model).args


def engine_for(loaded: LoadedModel, **overrides: Any) -> LLMEngine:
    config: dict[str, Any] = {
        "model": str(loaded.model_dir),
        "dtype": "float32",
        "device": "cpu",
        "max_model_len": 256,
        "kv_cache_memory_bytes": 8 << 20,
    }
    config.update(overrides)
    return LLMEngine(EngineConfig(**config), loaded=loaded)


@pytest.fixture(scope="module", params=ARCHITECTURES)
def case(request: pytest.FixtureRequest, tiny_model_dir: Callable[[str], Path]) -> tuple[LoadedModel, Any]:
    from transformers import AutoModelForCausalLM

    folder = tiny_model_dir(request.param)
    loaded = load_model(str(folder), dtype="float32", device="cpu")
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = eight_prompts(args_of(loaded).vocab_size)
    # ignore_eos on our side; HF stops only at an id no prompt or reply uses.
    expected = [hf_greedy(reference, p, {args_of(loaded).vocab_size + 1})[0] for p in prompts]
    return loaded, (prompts, expected)


def replies(engine: LLMEngine, prompts: list[list[int]]) -> list[list[int]]:
    return [out.outputs[0].token_ids for out in engine.generate(prompts, GREEDY)]


def test_eight_prompts_together_with_prefix_cache_hits(case: tuple[LoadedModel, Any]) -> None:
    loaded, (prompts, expected) = case
    engine = engine_for(loaded)
    assert replies(engine, prompts[:1]) == expected[:1]
    assert replies(engine, prompts) == expected
    assert engine.stats().prefix_cache_hits >= 3 * 32  # three later prompts reuse the shared two blocks
    assert engine.scheduler.block_manager.num_used_blocks == 0


def test_small_prefill_chunks_and_forced_preemption(case: tuple[LoadedModel, Any]) -> None:
    loaded, (prompts, expected) = case
    chunked = engine_for(loaded, max_num_batched_tokens=16, max_num_seqs=8, enable_prefix_caching=False)
    assert replies(chunked, prompts) == expected
    args = args_of(loaded)
    per_token = args.num_layers * 2 * args.num_kv_heads * args.head_dim * 4
    longest = max(len(p) for p in prompts) + MAX_TOKENS
    # A model that windows every layer hands old blocks back as it goes: only a cache about one long
    # sequence deep makes it preempt.
    slack = 8 if cast(DecoderForCausalLM, loaded.model).kv_window else 48
    tight = engine_for(loaded, max_model_len=longest, kv_cache_memory_bytes=per_token * (longest + slack))
    assert replies(tight, prompts) == expected
    assert tight.stats().num_preemptions > 0


def test_a_moe_model_is_captured_in_cuda_graphs_only_where_its_experts_take_the_fused_kernel(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    """The per-expert path reads group sizes on the host, which graph capture cannot hold: the runner asks
    first, and a model whose experts stay per-expert (here: on CPU, no Triton) decodes eagerly."""
    cpu = torch.device("cpu")
    moe_model = cast(DecoderForCausalLM, load_model(str(tiny_model_dir("olmoe")), dtype="float32").model)
    dense = cast(DecoderForCausalLM, load_model(str(tiny_model_dir("qwen2")), dtype="float32").model)
    assert not moe_model.cuda_graph_capturable(cpu, torch.float32)
    assert dense.cuda_graph_capturable(cpu, torch.float32)


def test_ngram_speculation_keeps_the_greedy_replies(case: tuple[LoadedModel, Any]) -> None:
    """Drafts verified in one step (a chunk of several rows per sequence through the same layers: windows,
    soft-caps, experts) accept exactly the tokens greedy decoding picks."""
    loaded, (prompts, expected) = case
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
    engine = engine_for(loaded, speculative=spec)
    assert replies(engine, prompts) == expected
    stats = engine.stats()
    assert stats.spec_decode_num_drafts > 0, "no drafts: the test would check nothing"


def test_a_model_windowed_on_every_layer_holds_kv_for_its_window_only(
    tiny_model_dir: Callable[[str], Path],
) -> None:
    """Mistral's window on every layer: a 130-token prompt fed in 16-token chunks, then 40 tokens more,
    never holds more blocks than the window, a chunk and the block in progress, and still equals HF."""
    from transformers import AutoModelForCausalLM

    folder = tiny_model_dir("mistral-window")
    loaded = load_model(str(folder), dtype="float32", device="cpu")
    window = cast(DecoderForCausalLM, loaded.model).kv_window
    assert window == 32
    prompt = eight_prompts(args_of(loaded).vocab_size)[-1]
    reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    expected = hf_greedy(reference, prompt, {args_of(loaded).vocab_size + 1}, max_new_tokens=40)[0]

    engine = engine_for(loaded, max_num_batched_tokens=16, max_num_seqs=8)
    manager = engine.scheduler.block_manager
    engine.add_request("long", prompt, SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    peak, reply = 0, []
    while engine.has_unfinished_requests():
        for out in engine.step():
            reply = out.outputs[0].token_ids
        peak = max(peak, manager.num_used_blocks)
    assert reply == expected
    block = manager.block_size
    # window keys (2 blocks, 3 when unaligned) + a 16-token chunk (1 block, 2 unaligned)
    assert peak <= 5 < manager.blocks_for(len(prompt) + 40)
    assert manager.num_used_blocks == 0 and len(prompt) > 4 * window // block * block


def test_a_fork_of_a_windowed_prompt_keeps_the_greedy_reply(case: tuple[LoadedModel, Any]) -> None:
    """n > 1 shares the parent's prompt blocks with its siblings; past a window, only those it still holds."""
    loaded, (prompts, expected) = case
    engine = engine_for(loaded, max_num_batched_tokens=16, max_num_seqs=8)
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True, n=2)
    (out,) = engine.generate([prompts[-1]], params)
    assert [o.token_ids for o in out.outputs] == [expected[-1]] * 2
    assert engine.scheduler.block_manager.num_used_blocks == 0
