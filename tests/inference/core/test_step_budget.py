"""The latency budget: with decodes running, a step's prefill tokens follow the measured step cost.

Timings are injected through Scheduler.record_step, so nothing here reads a clock.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference import EngineConfig
from inference.config import SchedulerConfig
from inference.core.block_manager import BlockManager
from inference.core.scheduler import Scheduler, StepCostModel
from inference.core.sequence import Sequence, SequenceStatus
from inference.sampling_params import SamplingParams
from tests.inference.core.test_block_manager import check_invariants
from tests.inference.fakes import FakeRunner


def make(target_ms=250.0, *, budget=4096, chunked=True, block_size=16, num_blocks=512, max_len=4096):
    cfg = SchedulerConfig(
        max_num_seqs=8,
        max_num_batched_tokens=budget,
        max_model_len=max_len,
        enable_chunked_prefill=chunked,
        max_step_latency_ms=target_ms,
    )
    sched = Scheduler(cfg, BlockManager(num_blocks, block_size))
    return sched, FakeRunner(num_blocks=num_blocks, block_size=block_size)


def seq(n, *, arrival=0.0, start=0):
    return Sequence("r", list(range(start, start + n)), SamplingParams(), max_tokens=64, arrival_time=arrival)


def run_step(sched, runner, seconds=None):
    """One step; seconds, when given, is reported as the step's measured duration."""
    out = sched.schedule()
    if out.is_empty:
        return out
    runner.execute(out.chunks)
    for s, done in zip(out.seqs, sched.update_computed(out), strict=True):
        if done:
            s.token_ids.append(7)
    if seconds is not None:
        sched.record_step(out, seconds)
    return out


def decoding(sched, runner, *, fixed_s=0.05, decode_steps=3):
    """A running stream that decoded a few steps at fixed_s, after prefill measured at 2 ms/token."""
    stream = seq(8)
    sched.add(stream)
    run_step(sched, runner)
    for _ in range(decode_steps):
        run_step(sched, runner, seconds=fixed_s)
    sched.cost.observe(100, fixed_s + 0.002 * 100)
    assert stream.is_decoding
    return stream


def test_cost_model_separates_the_fixed_cost_from_the_per_token_cost():
    model = StepCostModel()
    assert model.prefill_budget(0.25) is None  # nothing measured: no opinion
    model.observe(0, 0.05)
    model.observe(1000, 0.05 + 2.0)
    assert model.fixed_s == pytest.approx(0.05) and model.per_token_s == pytest.approx(0.002)
    assert model.prefill_budget(0.25) == 100  # (250 - 50) ms / 2 ms
    for _ in range(30):
        model.observe(0, 0.30)  # decode rows alone come to cost more than the target
    assert model.prefill_budget(0.25) == 0


def test_cost_model_is_a_moving_average_where_small_chunks_weigh_less():
    model = StepCostModel(alpha_fixed=0.5, alpha=0.5, full_weight_tokens=64)
    model.observe(0, 0.1)
    model.observe(0, 0.2)
    assert model.fixed_s == pytest.approx(0.15)
    model.observe(100, 0.15 + 0.1)  # 1 ms/token
    model.observe(200, 0.15 + 0.6)  # 3 ms/token: halfway there
    assert model.per_token_s == pytest.approx(0.002)
    model.observe(16, 0.15 + 16 * 0.010)  # 10 ms/token over 16 tokens: a quarter of the weight
    assert model.per_token_s == pytest.approx(0.002 + 0.5 * 0.25 * 0.008)


def test_cost_model_learns_how_context_raises_the_cost_of_a_token():
    model = StepCostModel()
    model.observe(0, 0.05)
    for context in (50, 500, 1000, 1500, 2000):
        model.observe(100, 0.05 + 100 * (0.001 + 2e-6 * context), context)
    a, b = model._line() or (0.0, 0.0)
    assert a == pytest.approx(0.001, rel=1e-6) and b == pytest.approx(2e-6, rel=1e-6)
    # 200 ms to spend from position 0: (b/2) n^2 + a n = 0.2 -> n ~ 171; deeper, fewer tokens fit.
    assert model.prefill_budget(0.25, 0) == 171
    assert model.prefill_budget(0.25, 2000) == 40


def test_cost_never_falls_with_context():
    model = StepCostModel()
    model.observe(0, 0.05)
    model.observe(100, 0.05 + 0.3, 100)
    model.observe(100, 0.05 + 0.1, 1000)  # cheaper deeper in (noise): no negative slope is learnt
    assert (model._line() or (0.0, 1.0))[1] == 0.0
    assert model.prefill_budget(0.25, 5000) == model.prefill_budget(0.25, 0)


def test_chunks_stay_near_the_target_as_a_long_prompt_goes_deeper():
    # A CPU-like cost: 20 ms fixed, 0.4 ms per token plus 0.6 ms per token per 1k tokens of context.
    def true_cost(out):
        return 0.02 + (out.prefill_context * 0.6e-6) + (sum(out.num_tokens) - out.num_decodes) * 0.4e-3

    sched, runner = make(250.0, budget=2048, num_blocks=1024, max_len=8192)
    stream = seq(8)
    sched.add(stream)
    for _ in range(4):  # its prefill, then decode steps, all timed by the same cost
        out = run_step(sched, runner)
        sched.record_step(out, true_cost(out))
    long = seq(6000, start=500, arrival=1.0)
    sched.add(long)
    durations = []
    while not long.is_decoding:
        out = run_step(sched, runner)
        seconds = true_cost(out)
        sched.record_step(out, seconds)
        durations.append(seconds)
    # Chunks are planned at 0.8 x the target. While the moving averages learn (a few chunks) steps may
    # overshoot the plan; then every chunk, ever deeper into the prompt, lands on the plan instead of
    # trailing the rising cost (a flat per-token estimate stays up to 20% over it for a dozen steps here).
    assert len(durations) > 40 and max(durations) < 0.25
    assert max(durations[8:]) < 0.25 * 0.8 * 1.05


def test_before_any_decode_only_step_the_whole_step_counts_as_prefill():
    model = StepCostModel()
    model.observe(100, 0.3)
    assert model.per_token_s == pytest.approx(0.003) and model.prefill_budget(0.25) == 83


def test_with_decodes_running_the_chunk_follows_the_measured_cost():
    sched, runner = make(250.0)
    stream = decoding(sched, runner)
    long = seq(3000, start=500, arrival=1.0)
    sched.add(long)
    out = run_step(sched, runner, seconds=0.05 + 0.002 * 75)
    assert out.seqs == [stream, long] and out.num_tokens == [1, 75]  # (0.8 x 250 - 50) / 2: planned under
    # That chunk came out dearer per token (longer context, say): the next one shrinks to match.
    out = run_step(sched, runner, seconds=0.05 + 0.004 * 75)
    assert out.num_tokens == [1, 75]
    expected = sched.cost.prefill_budget(0.25 * 0.8, long.num_computed_tokens)
    out = run_step(sched, runner, seconds=0.05 + 0.004 * 60)
    # Dearer at a deeper context: the model expects the next, deeper chunk to cost more again.
    assert out.num_tokens[0] == 1 and out.num_tokens[1] == expected and 16 < expected < 100


def test_the_floor_keeps_prefill_moving_when_decodes_alone_fill_the_target():
    sched, runner = make(250.0)
    stream = decoding(sched, runner, fixed_s=0.4)
    long = seq(3000, start=500, arrival=1.0)
    sched.add(long)
    for _ in range(3):
        out = run_step(sched, runner, seconds=1.0)
        assert out.seqs == [stream, long] and out.num_tokens == [1, 16]  # one block
    assert long.num_computed_tokens == 48


def test_the_floor_is_at_least_one_block():
    sched, runner = make(250.0, block_size=64)
    decoding(sched, runner, fixed_s=0.4)
    sched.add(seq(3000, start=500, arrival=1.0))
    assert run_step(sched, runner, seconds=1.0).num_tokens == [1, 64]


def test_without_decodes_prefill_uses_the_full_token_budget():
    sched, runner = make(250.0, budget=1024)
    decoding(sched, runner)
    for s in list(sched.running):
        sched.finish_requests([s], SequenceStatus.FINISHED_STOPPED)
    long = seq(3000, start=500)
    sched.add(long)
    out = run_step(sched, runner, seconds=5.0)
    assert out.num_tokens == [1024]


@pytest.mark.parametrize("target", [None, 0.0])
def test_off_when_the_target_is_none_or_zero(target):
    sched, runner = make(target)
    decoding(sched, runner)
    sched.add(seq(3000, start=500, arrival=1.0))
    assert run_step(sched, runner, seconds=5.0).num_tokens == [1, 3000]


def test_nothing_measured_means_no_limit():
    sched, runner = make(250.0)
    sched.add(seq(8))
    for _ in range(3):
        run_step(sched, runner)  # no timings reported
    sched.add(seq(3000, start=500, arrival=1.0))
    assert run_step(sched, runner).num_tokens == [1, 3000]


def test_without_chunked_prefill_the_budget_does_not_apply():
    sched, runner = make(250.0, chunked=False, max_len=4096)
    decoding(sched, runner)
    sched.add(seq(3000, start=500, arrival=1.0))
    assert run_step(sched, runner, seconds=5.0).num_tokens == [1, 3000]  # a whole prompt or nothing


def test_the_budget_is_shared_by_running_prefills_then_admissions():
    sched, runner = make(250.0)
    stream = decoding(sched, runner)
    a, b = seq(60, start=100, arrival=1.0), seq(200, start=300, arrival=2.0)
    sched.add(a)
    sched.add(b)
    out = run_step(sched, runner, seconds=0.05 + 0.002 * 75)
    assert out.seqs == [stream, a, b] and out.num_tokens == [1, 60, 15]  # 75 tokens: a's 60, then b
    out = run_step(sched, runner, seconds=0.05 + 0.002 * 75)
    assert out.seqs == [stream, a, b] and out.num_tokens == [1, 1, 75]  # a decodes now; b continues


def test_engine_config_passes_the_target_through_from_yaml():
    assert EngineConfig().scheduler_config(2048).max_step_latency_ms == 100.0
    for raw, want in [("120", 120.0), ("0", 0.0), ("none", None), ("", None), (75, 75.0)]:
        cfg = EngineConfig.from_dict({"max_step_latency_ms": raw})
        assert cfg.max_step_latency_ms == want
        assert cfg.scheduler_config(2048).max_step_latency_ms == want
    with pytest.raises(ValueError, match="max_step_latency_ms"):
        EngineConfig.from_dict({"max_step_latency_ms": "-5"})
    with pytest.raises(ValueError, match="max_step_latency_ms"):
        SchedulerConfig(max_step_latency_ms=-1.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "step", "step", "step", "finish"]), st.integers(0, 99)),
        max_size=60,
    ),
    st.floats(0.001, 2.0),
)
def test_random_timings_keep_blocks_consistent_and_chunks_within_budget(ops, per_token_s):
    sched, runner = make(100.0, budget=64, block_size=4, num_blocks=24, max_len=48)
    live: list[Sequence] = []
    for op, pick in ops:
        if op == "add":
            s = seq(1 + pick % 40, arrival=float(pick), start=pick % 5)
            sched.add(s)
            live.append(s)
        elif op == "step":
            decodes = sum(s.is_decoding for s in sched.running)
            limit = sched.cost.prefill_budget(0.1 * 0.8)  # what this step is scheduled under
            out = run_step(sched, runner)
            if out.is_empty:
                continue
            num_decodes = sum(n == 1 for n in out.num_tokens)
            prefill = sum(out.num_tokens) - out.num_decodes
            sched.record_step(out, 0.01 + per_token_s * prefill)
            assert sum(out.num_tokens) <= 64 and out.num_decodes <= num_decodes
            if decodes and limit is not None:
                assert prefill <= max(limit, 16) + decodes  # a preempted decode's token may go to prefill
            for s in list(sched.running):
                if len(s) >= 48:
                    sched.finish_requests([s], SequenceStatus.FINISHED_LENGTH)
        elif live:
            sched.finish_requests([live[pick % len(live)]], SequenceStatus.FINISHED_STOPPED)
        live = [s for s in live if not s.status.is_finished]
        check_invariants(sched.block_manager, live)
    sched.finish_requests(live, SequenceStatus.FINISHED_ABORTED)
    assert sched.block_manager.num_free_blocks == sched.block_manager.num_blocks
