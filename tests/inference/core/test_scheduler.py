from hypothesis import given, settings
from hypothesis import strategies as st

from inference.config import SchedulerConfig
from inference.core.block_manager import BlockManager
from inference.core.scheduler import Scheduler
from inference.core.sequence import Sequence, SequenceStatus
from inference.sampling_params import SamplingParams
from tests.inference.core.test_block_manager import check_invariants
from tests.inference.fakes import FakeRunner


def make(num_blocks=16, block_size=4, budget=32, max_seqs=4, chunked=True, max_len=32, replay=False):
    bm = BlockManager(num_blocks, block_size)
    cfg = SchedulerConfig(
        max_num_seqs=max_seqs,
        max_num_batched_tokens=budget,
        max_model_len=max_len,
        enable_chunked_prefill=chunked,
        replay_outputs_as_rows=replay,
    )
    return Scheduler(cfg, bm), FakeRunner(num_blocks=num_blocks, block_size=block_size)


def seq(n, *, priority=0, arrival=0.0, start=0):
    return Sequence(
        "r",
        list(range(start, start + n)),
        SamplingParams(),
        max_tokens=64,
        arrival_time=arrival,
        priority=priority,
    )


def run_step(sched, runner, token=7):
    out = sched.schedule()
    if out.is_empty:
        return out, []
    runner.execute(out.chunks)
    done = sched.update_computed(out)
    sampled = [s for s, d in zip(out.seqs, done, strict=True) if d]
    for s in sampled:
        s.token_ids.append(token)
    return out, sampled


def test_long_prompt_is_chunked_and_decode_goes_first():
    sched, runner = make(budget=8)
    short, long = seq(3, arrival=0), seq(20, arrival=1, start=100)
    sched.add(short)
    sched.add(long)
    out, sampled = run_step(sched, runner)
    assert out.num_tokens == [3, 5] and sampled == [short]
    out, _ = run_step(sched, runner)
    assert out.seqs[0] is short and out.num_tokens == [1, 7]  # the decode is never starved
    run_step(sched, runner)
    _, sampled = run_step(sched, runner)
    assert long in sampled and long.num_computed_tokens == 20


def test_priority_lower_value_first_then_fcfs():
    sched, runner = make(max_seqs=1)
    late_urgent = seq(3, priority=-1, arrival=5)
    early = seq(3, arrival=0, start=50)
    sched.add(early)
    sched.add(late_urgent)
    out, _ = run_step(sched, runner)
    assert out.seqs == [late_urgent]


def test_preemption_by_recompute_when_blocks_run_out():
    sched, runner = make(num_blocks=4, block_size=4, budget=32, max_len=16)
    a, b = seq(7, arrival=0), seq(7, arrival=1, start=40)
    sched.add(a)
    sched.add(b)
    run_step(sched, runner)
    assert sched.running == [a, b]
    for _ in range(3):
        run_step(sched, runner)
    assert sched.num_preemptions >= 1 and b.status is SequenceStatus.WAITING and b.block_table == []
    while not a.status.is_finished:
        run_step(sched, runner)
        if len(a) >= 12:
            sched.finish_requests([a], SequenceStatus.FINISHED_LENGTH)
    run_step(sched, runner)
    assert b.status is SequenceStatus.RUNNING and b.num_computed_tokens == len(b) - 1  # recomputed


def test_a_recomputed_sequence_replays_its_generated_tokens_as_rows_where_rows_round_apart():
    for replay in (False, True):
        sched, runner = make(num_blocks=4, block_size=4, budget=32, max_len=16, replay=replay)
        a, b = seq(7, arrival=0), seq(7, arrival=1, start=40)
        sched.add(a)
        sched.add(b)
        run_step(sched, runner)
        while b.status is not SequenceStatus.WAITING:  # until a's growth preempts it
            run_step(sched, runner)
        generated = b.num_output_tokens
        assert generated >= 1
        sched.finish_requests([a], SequenceStatus.FINISHED_LENGTH)
        chunks: list[tuple[int, int, bool]] = []
        sampled: list[Sequence] = []
        while b not in sampled:  # until it samples its next token: none it had is sampled again
            out, sampled = run_step(sched, runner)
            chunks += [(c.start, c.num_tokens, c.decoding) for c in out.chunks]
            assert len(chunks) <= 2 + generated, chunks
        start, end = chunks[0][0], 7 + generated  # past what the prefix cache kept, to its last token
        if replay:  # the rest of the prompt as a chunk, then each generated token as the row it first was
            prompt = [(start, 7 - start, False)] if start < 7 else []
            assert chunks == [*prompt, *((p, 1, True) for p in range(max(start, 7), end))], chunks
        else:  # everything in one prompt chunk
            assert chunks == [(start, end - start, False)], chunks


def test_without_chunking_a_prompt_waits_for_a_whole_budget():
    sched, runner = make(budget=32, chunked=False)
    a, b = seq(20), seq(20, arrival=1, start=60)
    sched.add(a)
    sched.add(b)
    out, _ = run_step(sched, runner)
    assert out.seqs == [a]


def test_abort_frees_blocks_from_either_queue():
    sched, runner = make(max_seqs=1)
    a, b = seq(9), seq(9, arrival=1, start=30)
    sched.add(a)
    sched.add(b)
    run_step(sched, runner)
    sched.finish_requests([a, b], SequenceStatus.FINISHED_ABORTED)
    assert not sched.has_unfinished() and sched.block_manager.num_free_blocks == 16
    assert a.status is SequenceStatus.FINISHED_ABORTED


@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "step", "step", "fork", "abort", "finish"]),
            st.integers(0, 99),
            st.integers(1, 14),
        ),
        max_size=50,
    ),
    st.integers(4, 12),
    st.booleans(),
)
def test_random_schedules_keep_blocks_consistent(ops, num_blocks, chunked):
    sched, runner = make(
        num_blocks=num_blocks,
        block_size=2,
        budget=8 if chunked else 16,
        max_seqs=3,
        chunked=chunked,
        max_len=8,
    )
    live: list[Sequence] = []
    for op, pick, size in ops:
        target = live[pick % len(live)] if live else None
        if op == "add":
            s = seq(min(size, 6), priority=pick % 2, arrival=float(len(live)), start=pick % 3)
            sched.add(s)
            live.append(s)
        elif op == "step":
            out, _ = run_step(sched, runner, token=pick)
            assert sum(out.num_tokens) <= sched.config.max_num_batched_tokens
            assert len(sched.running) <= sched.config.max_num_seqs
            for s in list(sched.running):
                if len(s) >= 8:
                    sched.finish_requests([s], SequenceStatus.FINISHED_LENGTH)
        elif target is None:
            continue
        elif op == "fork" and target.status is SequenceStatus.RUNNING and target.num_output_tokens:
            child = target.fork(1)
            sched.add_running_fork(target, child)
            live.append(child)
        elif op in ("abort", "finish"):
            status = SequenceStatus.FINISHED_ABORTED if op == "abort" else SequenceStatus.FINISHED_STOPPED
            sched.finish_requests([target], status)
        live = [s for s in live if not s.status.is_finished]
        check_invariants(sched.block_manager, live)
        assert set(map(id, sched.running)).isdisjoint(map(id, sched.waiting))
    sched.finish_requests(live, SequenceStatus.FINISHED_ABORTED)
    bm = sched.block_manager
    assert bm.num_free_blocks == bm.num_blocks and not sched.has_unfinished()
