"""Async scheduling (inference.core.async_step) on the CPU: the pipelined order gives the plain loop's output.

Every case runs the same requests with async_scheduling off and on and compares, per request, the final
token ids, text, finish and stop reasons, token counts, and the streamed deltas (which must add up to the
final output and never run past a stop). FakeRunner checks every KV slot it reads, and refuses to run a
placeholder, so a wrong in-flight feed or a wasted row written where it should not be shows up.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from inference import SamplingParams
from inference.core.async_step import PLACEHOLDER, can_pipeline
from inference.core.engine import LLMEngine
from inference.core.sequence import Sequence
from tests.inference.fakes import EOS, ByteTokenizer, fake_engine, reference_greedy

TOK = ByteTokenizer()
PROMPTS = ["Hello there", "a", "The quick brown fox jumps over the lazy dog", "xyz" * 9, "ok"]


def greedy(max_tokens: int = 12, **kw: Any) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def run(
    engine: LLMEngine, requests: list[tuple[str, SamplingParams]], abort_after: dict[str, int] | None = None
) -> dict[str, tuple[Any, ...]]:
    """Step to the end; per request: its final completions and what its stream delivered. abort_after:
    abort a request once its stream has delivered that many tokens (what a client would do)."""
    for i, (prompt, params) in enumerate(requests):
        engine.add_request(f"r{i}", TOK.encode(prompt), params)
    streamed: dict[tuple[str, int], list[int]] = {}
    texts: dict[tuple[str, int], str] = {}
    final: dict[str, Any] = {}
    abort_after = dict(abort_after or {})
    while engine.has_unfinished_requests():
        for out in engine.step():
            for c in out.outputs:
                key = (out.request_id, c.index)
                assert PLACEHOLDER not in c.token_ids
                streamed.setdefault(key, []).extend(c.delta_token_ids)
                texts[key] = texts.get(key, "") + c.delta_text
                assert streamed[key] == c.token_ids, "deltas must add up to the output"
            if out.finished:
                final[out.request_id] = out
            elif (
                out.request_id in abort_after and len(out.outputs[0].token_ids) >= abort_after[out.request_id]
            ):
                del abort_after[out.request_id]
                engine.abort_request(out.request_id)
    assert engine.scheduler.block_manager.num_used_blocks == 0
    result = {}
    for request_id, out in final.items():
        result[request_id] = tuple(
            (
                tuple(c.token_ids),
                c.text,
                texts[(request_id, c.index)] if c.token_ids else "",
                c.finish_reason,
                c.stop_reason,
                len(out.prompt_token_ids),
            )
            for c in out.outputs
        )
    return result


def both(requests: list[tuple[str, SamplingParams]], *, pipelined: bool = True, **config: Any) -> Any:
    """Run with async scheduling off and on; assert equal results; return them (and the async engine)."""
    abort_after = config.pop("abort_after", None)
    plain = run(fake_engine(async_scheduling=False, **config), requests, abort_after)
    engine = fake_engine(async_scheduling=True, **config)
    assert engine._pipeline is not None or not pipelined
    piped = run(engine, requests, abort_after)
    assert piped == plain
    assert (engine.runner.in_flight_rows > 0) == pipelined  # type: ignore[attr-defined]
    return plain, engine


def test_greedy_batch_of_mixed_lengths_matches_the_reference():
    requests = [(p, greedy(5 + 3 * i)) for i, p in enumerate(PROMPTS)]
    results, _ = both(requests)
    for i, (prompt, params) in enumerate(requests):
        assert list(results[f"r{i}"][0][0]) == reference_greedy(TOK.encode(prompt), params.max_tokens or 0)


def test_stop_strings_stop_ids_eos_and_max_tokens():
    ref = reference_greedy(TOK.encode("Hello there"), 20)
    text = TOK.decode(ref)
    stop_string = text[6:8]
    requests = [
        ("Hello there", greedy(20, stop=[stop_string])),
        ("Hello there", greedy(20, stop_token_ids=[ref[3]])),
        ("Hello there", greedy(20, stop_token_ids=[ref[4]], min_tokens=6)),
        ("The quick brown fox", greedy(3)),
        ("a", greedy(20, ignore_eos=True)),
        ("xyz", greedy(1)),
    ]
    results, _ = both(requests, max_num_seqs=4)
    assert results["r0"][0][3] == "stop" and results["r0"][0][4] == stop_string
    assert stop_string not in results["r0"][0][1]  # never a token past the stop
    assert results["r1"][0][0][-1] == ref[3] and len(results["r1"][0][0]) == 4
    assert results["r3"][0][3] == "length" and len(results["r3"][0][0]) == 3


def test_eos_ends_a_stream_in_flight():
    """A fake whose logits always favour EOS after a few tokens: each sequence stops at EOS while its next
    step is already scheduled, and that wasted row must not emit anything."""
    plain = fake_engine(async_scheduling=False)
    piped = fake_engine(async_scheduling=True)
    for engine in (plain, piped):
        execute = engine.runner.execute

        def eos_after_four(chunks, in_flight=None, _execute=execute):
            logits = _execute(chunks, in_flight) if in_flight is not None else _execute(chunks)
            for row, chunk in enumerate(chunks):
                if chunk.start + chunk.num_tokens >= len(chunk.token_ids) and len(chunk.token_ids) % 7 == 0:
                    logits.last[row, EOS] = 100.0
            return logits

        engine.runner.execute = eos_after_four  # type: ignore[method-assign]
    requests = [(p, greedy(30)) for p in PROMPTS]
    results = run(plain, requests)
    assert run(piped, requests) == results
    assert all(v[0][3] == "stop" and v[0][4] is None for v in results.values())  # every one by EOS
    assert piped.runner.in_flight_rows > 0  # type: ignore[attr-defined]


def test_aborts_mid_stream_drop_the_token_in_flight():
    requests = [(p, greedy(16)) for p in PROMPTS]
    results, _ = both(requests, abort_after={"r0": 3, "r2": 1, "r4": 5})
    assert results["r0"][0][3] == "abort" and len(results["r0"][0][0]) == 3
    assert results["r2"][0][3] == "abort" and len(results["r2"][0][0]) == 1


def test_preemption_under_a_tiny_kv_cache():
    requests = [(p, greedy(24)) for p in PROMPTS] * 2
    _, engine = both(requests, num_blocks=24, max_model_len=80, max_num_seqs=8, max_num_batched_tokens=64)
    assert engine.stats().num_preemptions > 0


def test_prefix_cache_hits_and_chunked_prefill():
    shared = "A system prompt long enough to span several blocks. "
    requests = [(shared + q, greedy(8)) for q in ("one?", "two?", "three?", "four?")]
    _, engine = both(requests, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=128)
    assert engine.stats().prefix_cache_hits > 0
    assert any(n > 1 and n < 16 for step in engine.runner.calls for _, n in step)  # type: ignore[attr-defined]


def test_n_greater_than_one_and_seeded_sampling():
    requests = [
        ("Hello", SamplingParams(n=3, temperature=0.8, seed=7, max_tokens=4)),  # synchronous while it runs
        ("seeded", SamplingParams(temperature=1.0, top_p=0.9, top_k=20, seed=3, max_tokens=14)),
        ("biased", SamplingParams(temperature=0.7, min_p=0.05, seed=5, logit_bias={97: 2.0}, max_tokens=14)),
        ("plain", greedy(14)),
    ]
    results, _ = both(requests)
    assert len(results["r0"]) == 3


def test_fallbacks_penalties_logprobs_and_min_tokens():
    requests = [
        ("Hello", SamplingParams(temperature=0.0, max_tokens=10, repetition_penalty=1.3)),
        ("Hello", SamplingParams(temperature=0.0, max_tokens=10, presence_penalty=1.0, seed=1)),
        ("logprobs", greedy(8, logprobs=2)),
        ("prompt logprobs", greedy(4, prompt_logprobs=1)),
        ("floor", greedy(10, min_tokens=6)),
    ]
    both(requests, pipelined=False)
    both([*requests, ("plain", greedy(30))], pipelined=True)  # the plain one pipelines once alone


def test_a_forward_failing_in_flight_retries_as_a_plain_step():
    requests = [(p, greedy(10)) for p in PROMPTS]
    plain = run(fake_engine(async_scheduling=False), requests)
    engine = fake_engine(async_scheduling=True)
    execute = engine.runner.execute
    failed = []

    def fail_once(chunks, in_flight=None):
        if in_flight is not None and not failed:
            failed.append(True)
            raise RuntimeError("transient")
        return execute(chunks, in_flight)

    engine.runner.execute = fail_once  # type: ignore[method-assign]
    assert run(engine, requests) == plain and failed


def test_outputs_come_one_step_later_and_length_ends_get_no_wasted_row():
    def steps(pipelined: bool) -> tuple[list[int], int]:
        engine = fake_engine(async_scheduling=pipelined)
        engine.add_request("a", TOK.encode("Hello"), greedy(5))
        counts = []
        while engine.has_unfinished_requests():
            counts.append(sum(len(out.outputs[0].delta_token_ids) for out in engine.step()))
        return counts, len(engine.runner.calls)  # type: ignore[attr-defined]

    plain, plain_calls = steps(False)
    piped, piped_calls = steps(True)
    assert plain == [1, 1, 1, 1, 1] and piped == [0, 1, 1, 1, 1, 1]
    assert piped_calls == plain_calls == 5  # the 5th token's step is not followed by a wasted one


def test_speculative_decoding_runs_the_plain_loop():
    requests = [("abcabcabcabc", greedy(12)), ("Hello there", greedy(12))]
    both(requests, pipelined=False, speculative={"method": "ngram", "num_speculative_tokens": 3})


def test_can_pipeline_and_the_default():
    seq = Sequence("r", [1, 2], greedy(4), max_tokens=4, arrival_time=0.0)
    assert can_pipeline(seq)
    for params in (
        greedy(4, logprobs=0),
        greedy(4, min_tokens=1),
        SamplingParams(n=2),
        greedy(4, frequency_penalty=1.0),
    ):
        assert not can_pipeline(Sequence("r", [1], params, max_tokens=4, arrival_time=0.0))
    assert fake_engine()._pipeline is None  # auto: off unless the runner is on CUDA
    from inference.core.async_step import make_pipeline

    on_cuda = fake_engine()
    on_cuda.runner.device = torch.device("cuda")  # type: ignore[attr-defined]
    assert make_pipeline(on_cuda) is not None  # auto: on for CUDA
    on_cuda.config.async_scheduling = False
    assert make_pipeline(on_cuda) is None
    spec = fake_engine(async_scheduling=True, speculative={"method": "ngram"})
    assert spec._pipeline is None  # drafting reads the last token: the plain loop
    runner_without = fake_engine().runner
    runner_without.supports_in_flight_ids = False  # type: ignore[attr-defined]
    from inference.config import EngineConfig
    from tests.inference.fakes import fake_loaded

    with pytest.raises(ValueError, match="in-flight"):
        LLMEngine(
            EngineConfig(model="fake", block_size=4, async_scheduling=True),
            loaded=fake_loaded(),
            runner=runner_without,
        )


def test_step_timings_when_pipelined():
    engine = fake_engine(async_scheduling=True, record_step_timings=True)
    run(engine, [(p, greedy(6)) for p in PROMPTS])
    timings = engine.stats().step_timings
    assert timings is not None and timings.steps > 0
    assert timings.schedule_s > 0 and timings.forward_s > 0 and timings.sample_s > 0 and timings.outputs_s > 0


def test_in_flight_ids_through_the_padded_graph_buffers(tiny_model_dir):
    """The CUDA graph path (run eagerly off CUDA, Triton's interpreter) takes its in-flight ids on the
    device buffers: the same tokens as the torch backend's plain loop."""
    import numpy as np

    from inference import EngineConfig
    from inference.models.loader.load import load_model
    from tests.inference.core.test_cuda_graphs import with_graphs

    loaded = load_model(str(tiny_model_dir("qwen2")), dtype="float32", device="cpu")

    def engine(backend: str, pipelined: bool) -> LLMEngine:
        config = EngineConfig(
            model="tiny", dtype="float32", device="cpu", max_model_len=256, kv_cache_memory_bytes=1 << 20,
            max_num_seqs=8, attention_backend=backend, async_scheduling=pipelined,
        )  # fmt: skip
        return LLMEngine(config, loaded=loaded)

    rng = np.random.default_rng(1)
    batch = [rng.integers(2, 500, size=n).tolist() for n in (5, 21, 40)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in (4, 7, 6)]
    expected = [out.outputs[0].token_ids for out in engine("torch", False).generate(batch, params)]
    piped = engine("triton", True)
    graphs = with_graphs(piped.runner, 8)  # type: ignore[arg-type]
    fed: list[int] = []
    run = graphs.run

    def counting_run(*args: Any) -> Any:
        fed.append(len(args[5].dst) if len(args) > 5 and args[5] is not None else 0)
        return run(*args)

    graphs.run = counting_run  # type: ignore[method-assign]
    assert [out.outputs[0].token_ids for out in piped.generate(batch, params)] == expected
    assert sum(fed) > 0


def test_config_key_from_yaml_and_its_validation():
    from inference.config import EngineConfig

    assert EngineConfig().async_scheduling is None  # auto
    assert EngineConfig.from_dict({"async_scheduling": "off"}).async_scheduling is False
    assert EngineConfig.from_dict({"async_scheduling": True}).async_scheduling is True
    assert EngineConfig.from_dict({"async_scheduling": "null"}).async_scheduling is None
    with pytest.raises(ValueError, match="async_scheduling"):
        EngineConfig.from_dict({"async_scheduling": "sometimes"})
    with pytest.raises(ValueError, match="async_scheduling"):
        EngineConfig(async_scheduling="yes")  # type: ignore[arg-type]


def test_aborting_the_last_request_leaves_nothing_behind():
    engine = fake_engine(async_scheduling=True)
    engine.add_request("a", TOK.encode("Hello"), greedy(20))
    for _ in range(3):
        engine.step()
    assert engine._pipeline is not None and engine._pipeline.in_flight is not None
    engine.abort_request("a")
    (out,) = engine.step()
    assert out.finished and out.outputs[0].finish_reason == "abort"
    assert PLACEHOLDER not in out.outputs[0].token_ids and len(out.outputs[0].token_ids) == 2
    assert not engine.has_unfinished_requests() and engine.scheduler.block_manager.num_used_blocks == 0
    (final,) = engine.generate([TOK.encode("Hi")], greedy(6))  # the stale step in flight is harmless
    assert list(final.outputs[0].token_ids) == reference_greedy(TOK.encode("Hi"), 6)
