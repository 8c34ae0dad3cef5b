"""On the real model: requests that fail inside a batched step end alone, and the healthy streams batched with
them get exactly the tokens they get undisturbed; the engine keeps serving."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch

from inference import AsyncEngine, RequestFailedError, SamplingParams
from tests.inference.real_model import PLAIN, make_engine

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def overflowing_processor(token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
    # What top_k=1e30 did inside the sampler before it was bounded: an overflow on one row.
    raise OverflowError("Overflow when unpacking long long")


def test_poisoned_requests_end_alone_on_the_real_model(default_loaded: Any) -> None:
    prompts = [list(default_loaded.tokenizer.encode(p)) for p in PLAIN]
    undisturbed = make_engine(default_loaded).generate(prompts, GREEDY)
    expected = [out.outputs[0].token_ids for out in undisturbed]

    engine = make_engine(default_loaded)
    execute = engine.runner.execute
    poison_prompt = list(default_loaded.tokenizer.encode("This prompt breaks the forward pass"))

    def forward_breaks_on_poison(chunks: Any) -> Any:
        if any(c.token_ids[: len(poison_prompt)] == poison_prompt for c in chunks):
            raise RuntimeError("kernel fault on this row")
        return execute(chunks)

    engine.runner.execute = forward_breaks_on_poison
    async_engine = AsyncEngine(engine)

    async def healthy(prompt: list[int]) -> list[int]:
        outs = [o async for o in async_engine.generate(prompt, GREEDY)]
        return outs[-1].outputs[0].token_ids

    async def poisoned(prompt: list[int], params: SamplingParams) -> None:
        async for _ in async_engine.generate(prompt, params):
            pass

    async def scenario() -> list[Any]:
        sampling_poison = SamplingParams(max_tokens=12, logits_processors=[overflowing_processor])
        return await asyncio.gather(
            *(healthy(p) for p in prompts),
            poisoned(prompts[0], sampling_poison),
            poisoned(poison_prompt, GREEDY),
            return_exceptions=True,
        )

    try:
        results = asyncio.run(scenario())
        assert results[: len(prompts)] == expected
        assert all(isinstance(r, RequestFailedError) for r in results[len(prompts) :]), results
        assert async_engine.health().state == "ready"
        stats = async_engine.stats()
        assert (stats.num_running, stats.num_waiting, stats.kv_cache_usage) == (0, 0, 0.0)
        assert stats.finished_by_reason.get("error") == 2
        again = asyncio.run(healthy(prompts[1]))
        assert again == expected[1]
    finally:
        async_engine.shutdown()
