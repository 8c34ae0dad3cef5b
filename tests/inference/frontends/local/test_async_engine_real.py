"""AsyncEngine over the real model: a burst of announced requests shares its first step (CPU, fp32)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from inference import AsyncEngine, RequestOutput, SamplingParams
from inference.core.model_io import ScheduledChunk, StepLogits
from tests.inference.real_model import QUESTIONS, make_engine

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
# More than the quiet gap (AdmissionGate.gap_s) apart, well inside max_s: only expect() keeps them together.
STAGGER_S = 0.005


def user_ids(tokenizer: Any, question: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=True
    )
    return [int(t) for t in (ids if isinstance(ids, list) else ids["input_ids"])]


def record_steps(engine: AsyncEngine) -> list[list[tuple[int, int]]]:
    """(start, num_tokens) of each chunk, per runner.execute call, in the order the steps ran."""
    steps: list[list[tuple[int, int]]] = []
    runner: Any = engine.engine.runner
    execute = runner.execute

    def recording(chunks: list[ScheduledChunk]) -> StepLogits:
        steps.append([(c.start, c.num_tokens) for c in chunks])
        return execute(chunks)

    runner.execute = recording
    return steps


async def caller(engine: AsyncEngine, index: int) -> list[RequestOutput]:
    """What the API pipeline does: announce, prepare off the loop, submit and wait for the first output."""
    with engine.expect():
        await asyncio.sleep(index * STAGGER_S)  # auth and DB reads take a while, longer for some callers
        ids = await asyncio.to_thread(
            engine.apply_chat_template, [{"role": "user", "content": QUESTIONS[index]}]
        )
        gen = engine.generate(ids, GREEDY, request_id=f"burst-{index}")
        outputs = [await anext(gen)]
    outputs += [out async for out in gen]
    return outputs


def test_an_announced_burst_is_prefilled_in_one_step_with_unchanged_tokens(default_loaded):
    prompt_ids = [user_ids(default_loaded.tokenizer, q) for q in QUESTIONS]
    reference = make_engine(default_loaded)
    alone = [reference.generate([p], GREEDY)[0].outputs[0].token_ids for p in prompt_ids]
    engine = AsyncEngine(make_engine(default_loaded))
    steps = record_steps(engine)

    async def burst() -> list[list[RequestOutput]]:
        return await asyncio.gather(*(caller(engine, i) for i in range(len(QUESTIONS))))

    try:
        results = asyncio.run(burst())
    finally:
        engine.shutdown()
    # The first step prefilled every prompt whole, side by side.
    assert sorted(steps[0]) == sorted((0, len(p)) for p in prompt_ids)
    for outputs, expected in zip(results, alone, strict=True):
        assert outputs[-1].finished and outputs[-1].outputs[0].finish_reason == "length"
        assert outputs[-1].outputs[0].token_ids == expected  # batching changed no token
    assert len({outputs[0].metrics.first_scheduled_time for outputs in results}) == 1
    assert engine.admission.announced == 0
    assert engine.engine.scheduler.block_manager.num_used_blocks == 0
