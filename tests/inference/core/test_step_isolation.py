"""A request that breaks its step ends alone; the rest of the batch gets exactly the tokens it would have."""

import pytest

from inference import RequestFailedError, SamplingParams
from inference.core.engine import MAX_FAILED_STEPS_IN_A_ROW
from inference.errors import EngineBrokenError
from tests.inference.fakes import ByteTokenizer, fake_engine, reference_greedy

TOK = ByteTokenizer()
HEALTHY = [TOK.encode(p) for p in ("hello", "The quick brown fox", "x" * 21)]
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
POISON = 7  # a byte no healthy prompt contains


def run_to_end(engine):
    finished = {}
    while engine.has_unfinished_requests():
        finished.update((o.request_id, o) for o in engine.step() if o.finished)
    return finished


def assert_healthy_exact(engine, finished):
    for i, prompt in enumerate(HEALTHY):
        assert finished[f"ok{i}"].outputs[0].token_ids == reference_greedy(prompt, 10)
    # Nothing leaked: every block is back and nothing is queued.
    assert engine.scheduler.block_manager.usage == 0.0
    assert not engine.scheduler.running and not engine.scheduler.waiting


def add_healthy(engine):
    for i, prompt in enumerate(HEALTHY):
        engine.add_request(f"ok{i}", prompt, GREEDY)


def test_a_failing_logits_processor_ends_its_request_alone():
    def explode(token_ids, logits):
        if len(token_ids) > 6:
            raise OverflowError("Overflow when unpacking long long")
        return logits

    engine = fake_engine(max_model_len=200)
    add_healthy(engine)
    engine.add_request(
        "bad", [1, 2, 3], SamplingParams(temperature=0, max_tokens=10, logits_processors=[explode])
    )
    finished = run_to_end(engine)
    assert "bad" not in finished
    failures = engine.take_failures()
    assert [rid for rid, _ in failures] == ["bad"]
    assert isinstance(failures[0][1], RequestFailedError) and "Overflow" not in str(failures[0][1])
    assert engine.take_failures() == []
    assert engine.stats().finished_by_reason == {"length": 3, "error": 1}
    assert_healthy_exact(engine, finished)


@pytest.mark.parametrize("n", [1, 3])
def test_a_request_that_breaks_the_forward_pass_ends_alone(n):
    engine = fake_engine(max_model_len=200)
    execute = engine.runner.execute

    def poisoned(chunks):
        if any(POISON in c.token_ids for c in chunks):
            raise IndexError("index out of range in self")
        return execute(chunks)

    engine.runner.execute = poisoned
    add_healthy(engine)
    engine.add_request("bad", [1, 2, POISON], SamplingParams(n=n, temperature=0.8, max_tokens=10, seed=1))
    finished = run_to_end(engine)
    assert [rid for rid, _ in engine.take_failures()] == ["bad"]
    assert_healthy_exact(engine, finished)


def test_a_poison_token_sampled_mid_stream_ends_only_that_request():
    # The request runs fine until its own output brings the poison into a decode step with others.
    engine = fake_engine(max_model_len=200)
    execute = engine.runner.execute
    engine.runner.execute = lambda chunks: (
        (_ for _ in ()).throw(ValueError("bad row"))
        if any(c.token_ids[-1] == POISON for c in chunks)
        else execute(chunks)
    )
    add_healthy(engine)
    engine.add_request(
        "bad", [1, 2, 3], SamplingParams(temperature=0, max_tokens=10, logit_bias={POISON: 100})
    )
    finished = run_to_end(engine)
    assert [rid for rid, _ in engine.take_failures()] == ["bad"]
    assert_healthy_exact(engine, finished)


def test_steps_that_keep_failing_mean_the_engine_is_broken():
    engine = fake_engine(max_model_len=200)
    engine.runner.fail_with = RuntimeError("device lost")
    for i in range(MAX_FAILED_STEPS_IN_A_ROW - 1):
        engine.add_request(f"r{i}", [1, 2, 3], GREEDY)
        assert engine.step() == []  # each failure ended its request alone
    assert len(engine.take_failures()) == MAX_FAILED_STEPS_IN_A_ROW - 1
    engine.add_request("last", [1, 2, 3], GREEDY)
    with pytest.raises(EngineBrokenError):
        engine.step()


def test_a_healthy_step_resets_the_failure_count():
    engine = fake_engine(max_model_len=200)
    for round_ in range(3):
        engine.runner.fail_with = RuntimeError("flaky")
        for i in range(MAX_FAILED_STEPS_IN_A_ROW - 1):
            engine.add_request(f"r{round_}-{i}", [1, 2, 3], GREEDY)
            engine.step()
        engine.runner.fail_with = None
        engine.add_request(f"ok{round_}", [1, 2, 3], GREEDY)
        assert run_to_end(engine)[f"ok{round_}"].outputs[0].token_ids == reference_greedy([1, 2, 3], 10)


def test_a_batch_that_fails_only_together_is_an_engine_fault():
    engine = fake_engine(max_model_len=200)
    execute = engine.runner.execute
    engine.runner.execute = lambda chunks: (
        (_ for _ in ()).throw(RuntimeError("batch kernel")) if len(chunks) > 1 else execute(chunks)
    )
    add_healthy(engine)
    with pytest.raises(EngineBrokenError):
        engine.step()


def test_prompt_token_ids_outside_the_vocabulary_are_refused_up_front():
    engine = fake_engine()
    vocab = engine.runner.vocab_size
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request("a", [1, vocab], GREEDY)
    with pytest.raises(ValueError, match="token ids"):
        engine.add_request("b", [-1, 2], GREEDY)
    engine.add_request("c", [0, vocab - 1], GREEDY)
