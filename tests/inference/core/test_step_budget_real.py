"""The latency budget changes only how prompts are chunked, never what greedy decoding produces."""

from __future__ import annotations

import pytest

from inference import SamplingParams
from tests.inference.real_model import MAX_TOKENS, PLAIN, hf_greedy, make_engine, prompts

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)


def test_greedy_outputs_match_hf_while_decodes_squeeze_prefill_to_the_floor(default_loaded, hf_reference):
    tokenizer = default_loaded.tokenizer
    all_prompts = prompts(tokenizer)
    long_prompt = list(tokenizer.encode(" ".join([PLAIN[2]] * 4)))
    assert len(long_prompt) > 200
    first = [p for p in all_prompts if len(p) < 16]
    later = [p for p in all_prompts if len(p) >= 16] + [long_prompt]
    # A 1 ms target is below any real step, so every step with a decode row gets the 16-token floor.
    engine = make_engine(default_loaded, max_step_latency_ms=1.0, enable_prefix_caching=False)
    steps: list[tuple[int, list[int]]] = []
    schedule = engine.scheduler.schedule

    def recording_schedule():
        out = schedule()
        steps.append((out.num_decodes, list(out.num_tokens)))
        return out

    engine.scheduler.schedule = recording_schedule  # type: ignore[method-assign]
    ids = [engine.add_request(None, p, GREEDY) for p in first]
    final = {}
    for _ in range(2):  # prefill, then a decode step: the streams are running when the rest arrive
        final.update((o.request_id, o) for o in engine.step() if o.finished)
    ids += [engine.add_request(None, p, GREEDY) for p in later]
    while engine.has_unfinished_requests():
        final.update((o.request_id, o) for o in engine.step() if o.finished)

    for request_id, prompt in zip(ids, first + later, strict=True):
        expected, _ = hf_greedy(hf_reference, prompt, default_loaded.eos_token_ids)
        assert final[request_id].outputs[0].token_ids == expected, f"prompt of {len(prompt)} tokens diverged"
    squeezed = [tokens for decodes, tokens in steps if decodes and sum(tokens) - decodes == 16]
    assert len(squeezed) >= len(long_prompt) // 16 - 1  # the long prompt went through in floor-size chunks
    assert engine.scheduler.cost.fixed_s is not None  # the engine reports its step timings
    assert engine.scheduler.block_manager.num_used_blocks == 0
