"""The correctness oracle: greedy output equals Hugging Face generate() token for token (CPU, fp32)."""

from __future__ import annotations

import asyncio

import pytest

from inference import AsyncEngine, SamplingParams
from tests.inference.real_model import MAX_TOKENS, chat_ids, hf_greedy, make_engine, prompts

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, logprobs=0)


@pytest.fixture(scope="module")
def cases(default_loaded, hf_reference):
    tokenizer = default_loaded.tokenizer
    all_prompts = prompts(tokenizer)
    assert any(len(p) > 48 for p in all_prompts) and any(len(p) < 16 for p in all_prompts)
    return [(p, *hf_greedy(hf_reference, p, default_loaded.eos_token_ids)) for p in all_prompts]


def check(outputs, cases, *, logprobs=False):
    for out, (prompt, tokens, hf_logprobs) in zip(outputs, cases, strict=True):
        completion = out.outputs[0]
        assert completion.token_ids == tokens, f"prompt of {len(prompt)} tokens diverged"
        if logprobs:
            ours = [chosen.logprob for chosen, _ in completion.logprobs]
            assert max(abs(a - b) for a, b in zip(ours, hf_logprobs, strict=True)) < 1e-3


def test_one_at_a_time_and_all_together_without_prefix_cache(default_loaded, cases):
    engine = make_engine(default_loaded, enable_prefix_caching=False)
    for case in cases:
        check(engine.generate([case[0]], GREEDY), [case], logprobs=True)
    check(engine.generate([c[0] for c in cases], GREEDY), cases, logprobs=True)
    assert engine.stats().prefix_cache_hits == 0
    assert engine.scheduler.block_manager.num_used_blocks == 0


def test_prefix_cache_hits_on_the_shared_system_prompt(default_loaded, cases):
    engine = make_engine(default_loaded)
    chat = [c for c in cases if c[0][:5] == cases[-1][0][:5]]
    check(engine.generate([chat[0][0]], GREEDY), chat[:1])
    check(engine.generate([c[0] for c in cases], GREEDY), cases)
    stats = engine.stats()
    assert stats.prefix_cache_hits >= 3 * 32  # the system prompt spans several full blocks


def test_forced_preemption_with_a_tiny_kv_cache(default_loaded, cases):
    longest = max(len(c[0]) for c in cases) + MAX_TOKENS
    per_token = 30 * 2 * 3 * 64 * 4  # layers * (k, v) * kv heads * head dim * fp32
    engine = make_engine(
        default_loaded, max_model_len=longest, kv_cache_memory_bytes=per_token * (longest + 40)
    )
    check(engine.generate([c[0] for c in cases], GREEDY), cases)
    assert engine.stats().num_preemptions > 0


def test_forced_small_prefill_chunks(default_loaded, cases):
    engine = make_engine(
        default_loaded, max_num_batched_tokens=16, max_num_seqs=8, enable_prefix_caching=False
    )
    check(engine.generate([c[0] for c in cases], GREEDY), cases)


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(default_loaded, cases):
    engine = make_engine(default_loaded, enable_prefix_caching=False)
    seeded = SamplingParams(temperature=0.9, top_p=0.95, seed=42, max_tokens=16)
    noise = SamplingParams(temperature=1.0, max_tokens=16)
    (alone,) = engine.generate([cases[1][0]], seeded)
    mixed = engine.generate([cases[5][0], cases[1][0], cases[2][0]], [noise, seeded, noise])
    assert mixed[1].outputs[0].token_ids == alone.outputs[0].token_ids
    (n3,) = engine.generate([cases[1][0]], SamplingParams(n=3, temperature=1.0, seed=1, max_tokens=12))
    assert len(n3.outputs) == 3 and len({tuple(c.token_ids) for c in n3.outputs}) > 1
    assert engine.scheduler.block_manager.num_used_blocks == 0


def test_stop_strings_and_multibyte_streaming(default_loaded):
    engine = make_engine(default_loaded)
    tokenizer = default_loaded.tokenizer
    target = "月が綺麗ですね 🌙🚀"
    forced = list(tokenizer.encode(target))
    prompt = chat_ids(tokenizer, "Say something nice.")

    def force(ids, row):
        position = len(ids) - len(prompt)
        out = row.clone().fill_(float("-inf"))
        out[forced[position] if position < len(forced) else tokenizer.eos_token_id] = 0.0
        return out

    engine.add_request("mb", prompt, SamplingParams(temperature=0, max_tokens=40, logits_processors=[force]))
    deltas, final = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            deltas.append(out.outputs[0].delta_text)
            final = out
    assert final is not None and "".join(deltas) == final.outputs[0].text == target
    assert all("\ufffd" not in d for d in deltas)
    (stopped,) = engine.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=40, logits_processors=[force], stop=["綺麗"])
    )
    assert stopped.outputs[0].text == "月が" and stopped.outputs[0].stop_reason == "綺麗"


def test_async_abort_by_closing_the_iterator_frees_blocks(default_loaded):
    engine = AsyncEngine(make_engine(default_loaded))

    async def scenario():
        params = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
        gen = engine.generate("Tell me a very long story about the sea.", params)
        got = [await anext(gen), await anext(gen)]
        await gen.aclose()
        for _ in range(500):
            if engine.stats().num_running == 0 and engine.engine.scheduler.block_manager.num_used_blocks == 0:
                return got
            await asyncio.sleep(0.01)
        raise AssertionError("blocks were not freed")

    try:
        got = asyncio.run(scenario())
        assert not got[-1].finished and engine.stats().finished_by_reason == {"abort": 1}
    finally:
        engine.shutdown()
