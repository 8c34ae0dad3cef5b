"""Async scheduling with the bundled model in fp32 on the CPU: the pipelined order emits exactly the tokens,
text and finish reasons of the plain loop, through the real runner's in-flight id feed (fused decode and
the eager path), with prefix-cache hits, chunked prefill, preemption, stop strings, seeded sampling and
a request with a penalty (whose steps run synchronously)."""

from __future__ import annotations

from typing import Any

import pytest

from inference import SamplingParams
from inference.core.model_io import InFlightIds
from tests.inference.real_model import make_engine, prompts

pytestmark = pytest.mark.slow

MAX_TOKENS = 12


def _outputs(engine: Any, all_prompts: list[list[int]], params: list[SamplingParams]) -> list[Any]:
    return [
        (tuple(c.token_ids), c.text, c.finish_reason, c.stop_reason)
        for out in engine.generate(all_prompts, params)
        for c in out.outputs
    ]


def _count_feeds(engine: Any) -> list[int]:
    """Wrap the runner so the test sees how many input ids came from a step in flight."""
    fed = [0]
    execute = engine.runner.execute

    def counting(chunks: Any, in_flight: InFlightIds | None = None) -> Any:
        fed[0] += len(in_flight.dst) if in_flight is not None else 0
        return execute(chunks, in_flight)

    engine.runner.execute = counting
    return fed


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # prefix-cache hits on the shared system prompt, fused decode steps
        {"max_num_batched_tokens": 32, "max_num_seqs": 8, "enable_prefix_caching": False},  # chunked
        {"max_model_len": 160, "kv_cache_memory_bytes": 30 * 2 * 3 * 64 * 4 * 200},  # preemption
    ],
    ids=["prefix-cache", "chunked-prefill", "preemption"],
)
def test_pipelined_greedy_equals_the_plain_loop(default_loaded, overrides):
    tokenizer = default_loaded.tokenizer
    all_prompts = [p for p in prompts(tokenizer) if len(p) < 120]
    text = tokenizer.decode(all_prompts[1])
    params = [SamplingParams(temperature=0, max_tokens=MAX_TOKENS + i) for i in range(len(all_prompts))]
    params[0] = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, stop=[" the", "."])
    params[2] = SamplingParams(temperature=0.8, top_p=0.9, top_k=40, seed=11, max_tokens=MAX_TOKENS)
    params[3] = SamplingParams(temperature=0, repetition_penalty=1.3, max_tokens=4)  # synchronous steps
    plain_engine = make_engine(default_loaded, async_scheduling=False, **overrides)
    plain = _outputs(plain_engine, all_prompts, params)
    plain_preemptions = plain_engine.stats().num_preemptions
    del plain_engine
    engine = make_engine(default_loaded, async_scheduling=True, **overrides)
    fed = _count_feeds(engine)
    assert _outputs(engine, all_prompts, params) == plain, text
    assert fed[0] > 0
    assert engine.scheduler.block_manager.num_used_blocks == 0
    if "kv_cache_memory_bytes" in overrides:
        assert plain_preemptions > 0 and engine.stats().num_preemptions > 0
