"""LLMEngine end to end over the checking FakeRunner: fast, and exact against a cache-free reference."""

import pytest

from inference import PromptTooLongError, QueueFullError, SamplingParams
from tests.inference.fakes import EOS, ByteTokenizer, fake_engine, reference_greedy

TOK = ByteTokenizer()
SHARED = "You are a helpful assistant. Answer briefly. "
PROMPTS = [
    TOK.encode(p)
    for p in (
        "hi",
        "The quick brown fox",
        SHARED + "What is 2+2?",
        SHARED + "Name a colour.",
        "x" * 37,
        SHARED + "Why is the sky blue? Explain in detail please.",
        "ab",
        "0123456789abcdef",
    )
]
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def expected(prompt):
    return reference_greedy(prompt, 12)


def assert_matches_reference(engine, prompts=PROMPTS):
    outs = engine.generate(prompts, GREEDY)
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.outputs[0].token_ids == expected(prompt)
        assert out.outputs[0].finish_reason == "length"
    assert engine.scheduler.block_manager.num_used_blocks == 0


def test_one_at_a_time_and_all_together():
    engine = fake_engine()
    for prompt in PROMPTS:
        assert_matches_reference(engine, [prompt])
    assert_matches_reference(fake_engine())


def test_prefix_cache_hits_give_identical_tokens():
    engine = fake_engine()
    assert_matches_reference(engine, PROMPTS[2:3])
    assert_matches_reference(engine)
    stats = engine.stats()
    assert stats.prefix_cache_hits >= len(SHARED) // 4 * 4
    assert stats.prefix_cache_hits <= stats.prefix_cache_queries


def test_preemption_and_small_chunks_give_identical_tokens():
    engine = fake_engine(num_blocks=28, max_model_len=108, max_num_seqs=8, max_num_batched_tokens=64)
    assert_matches_reference(engine)
    assert engine.stats().num_preemptions > 0
    assert_matches_reference(fake_engine(max_num_batched_tokens=8, max_num_seqs=4))
    assert_matches_reference(
        fake_engine(enable_prefix_caching=False, max_num_batched_tokens=8, max_num_seqs=8)
    )


def test_n_greater_than_one_forks_and_frees_everything():
    engine = fake_engine()
    prompt = TOK.encode(SHARED + "Pick a word:")
    (out,) = engine.generate(
        [prompt], SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=10, ignore_eos=True)
    )
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert all(len(c.token_ids) == 10 for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    (again,) = engine.generate(
        [prompt], SamplingParams(n=4, temperature=1.0, seed=7, max_tokens=10, ignore_eos=True)
    )
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in out.outputs]
    (greedy,) = engine.generate([prompt], SamplingParams(n=3, temperature=0, max_tokens=10, ignore_eos=True))
    assert all(c.token_ids == reference_greedy(prompt, 10) for c in greedy.outputs)
    assert engine.scheduler.block_manager.num_used_blocks == 0


def test_stop_strings_stop_ids_eos_and_max_tokens():
    engine = fake_engine()
    prompt = PROMPTS[1]
    ref = expected(prompt)
    text = TOK.decode(ref)
    stop = text[3:5]
    (out,) = engine.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=12, stop=[stop], ignore_eos=True)
    )
    first = text.index(stop)
    assert out.outputs[0].text == text[:first] and out.outputs[0].stop_reason == stop
    assert out.outputs[0].finish_reason == "stop"
    (out,) = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=12, stop_token_ids=[ref[2]]))
    assert out.outputs[0].token_ids == ref[: ref.index(ref[2]) + 1] and out.outputs[0].stop_reason == ref[2]
    (out,) = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=5, logit_bias={EOS: 100}))
    assert (
        out.outputs[0].token_ids == [EOS] and out.outputs[0].text == "" and out.outputs[0].stop_reason is None
    )
    (out,) = engine.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=3, min_tokens=3, logit_bias={EOS: 100})
    )
    assert len(out.outputs[0].token_ids) == 3 and out.outputs[0].finish_reason == "length"


def test_max_tokens_none_runs_to_the_context_limit():
    engine = fake_engine(max_model_len=40)
    (out,) = engine.generate([PROMPTS[1]], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))
    assert len(PROMPTS[1]) + len(out.outputs[0].token_ids) == 40 and out.outputs[0].finish_reason == "length"


def test_prompt_too_long_and_queue_full():
    engine = fake_engine(max_model_len=32, max_queue_len=2)
    with pytest.raises(PromptTooLongError):
        engine.add_request(None, list(range(1, 33)), GREEDY)
    with pytest.raises(PromptTooLongError):
        engine.add_request(None, list(range(1, 25)), SamplingParams(max_tokens=9))
    assert isinstance(PromptTooLongError("x"), ValueError)
    engine.add_request(None, [1, 2], GREEDY)
    engine.add_request(None, [1, 2], GREEDY)
    with pytest.raises(QueueFullError):
        engine.add_request(None, [1, 2], GREEDY)


def test_abort_mid_generation_frees_every_block():
    engine = fake_engine()
    rid = engine.add_request("a", PROMPTS[5], GREEDY)
    engine.add_request("b", PROMPTS[4], GREEDY)
    for _ in range(3):
        engine.step()
    assert engine.scheduler.block_manager.num_used_blocks > 0
    engine.abort_request(rid)
    outs = engine.step()
    aborted = next(o for o in outs if o.request_id == "a")
    assert aborted.finished and aborted.outputs[0].finish_reason == "abort"
    engine.abort_request("b")
    engine.step()
    assert engine.scheduler.block_manager.num_used_blocks == 0 and not engine.has_unfinished_requests()
    assert engine.stats().finished_by_reason == {"abort": 2}


def test_streamed_deltas_add_up_and_metrics_are_recorded():
    engine = fake_engine()
    # Force a run of multibyte output: the bytes of "月🌙" one token at a time, then EOS.
    forced = [*TOK.encode("月🌙"), EOS]
    processors = [lambda ids, row, forced=forced: _force(ids, row, forced, len(PROMPTS[0]))]
    engine.add_request(
        "m", PROMPTS[0], SamplingParams(temperature=0, max_tokens=20, logits_processors=processors)
    )
    deltas, final = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            deltas.append(out.outputs[0].delta_text)
            final = out
    assert final is not None and final.finished
    assert "".join(deltas) == final.outputs[0].text == "月🌙"
    assert all("\ufffd" not in d for d in deltas)
    m = final.metrics
    assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= m.finished_time


def _force(ids, row, forced, prompt_len):
    import torch

    out = torch.full_like(row, float("-inf"))
    out[forced[len(ids) - prompt_len]] = 0.0
    return out


def test_logprobs_and_prompt_logprobs():
    from tests.inference.fakes import context_logits

    engine = fake_engine(max_num_batched_tokens=8, max_num_seqs=4)
    prompt = PROMPTS[3]
    (out,) = engine.generate(
        [prompt], SamplingParams(temperature=0, max_tokens=3, logprobs=2, prompt_logprobs=1)
    )
    assert out.prompt_logprobs is not None and out.prompt_logprobs[0] is None
    assert len(out.prompt_logprobs) == len(prompt)
    chosen, top = out.prompt_logprobs[5]
    ref = context_logits(prompt[:5]).log_softmax(-1)
    assert (
        chosen.token_id == prompt[5] and abs(chosen.logprob - ref[prompt[5]].item()) < 1e-5 and len(top) == 1
    )
    lps = out.outputs[0].logprobs
    assert (
        lps is not None
        and len(lps) == 3
        and len(lps[0][1]) == 2
        and lps[0][0].token == TOK.decode([lps[0][0].token_id])
    )


def test_step_timings_are_recorded_only_when_asked():
    plain = fake_engine(max_model_len=200)
    plain.generate([TOK.encode("hi")], GREEDY)
    assert plain.stats().step_timings is None

    timed = fake_engine(max_model_len=200, record_step_timings=True)
    steps = 0
    timed.add_request("a", TOK.encode("hi"), GREEDY)
    while timed.has_unfinished_requests():
        timed.step()
        steps += 1
    timings = timed.stats().step_timings
    assert timings is not None and timings.steps == steps
    assert timings.schedule_s > 0 and timings.forward_s > 0 and timings.sample_s > 0 and timings.outputs_s > 0
    assert timings.wait_s == 0 and timings.device_forward_s == 0  # synchronous, on the CPU
    phases = ("schedule", "inputs", "forward", "sample", "outputs", "wait")
    assert timings.total_s == pytest.approx(sum(getattr(timings, f"{p}_s") for p in phases))
    snapshot = timed.stats().step_timings
    timed.step()
    assert snapshot is not None and snapshot.steps == steps  # a snapshot is a copy
