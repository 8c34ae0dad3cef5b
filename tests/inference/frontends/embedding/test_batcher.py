"""EmbeddingBatcher and EmbeddingEngine.embed with a fake model: what runs together, the bounded queue,
and a cancelled caller's request dropped. Ordering comes from events the fake batch waits on, not timing."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from inference.errors import EngineDeadError, QueueFullError, RequestFailedError
from inference.frontends.embedding.batcher import EmbeddingBatcher, EmbedRequest, Vectors


class FakeModel:
    """Embeds a row as [its first id, its length]; the first batch holds until `release` is set."""

    def __init__(self) -> None:
        self.batches: list[list[list[int]]] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def __call__(self, rows: list[list[int]]) -> Vectors:
        self.batches.append(rows)
        self.started.set()
        assert self.release.wait(10), "the test never released the first batch"
        if rows[0][0] < 0:
            raise RuntimeError("a failing batch")
        return [[float(row[0]), float(len(row))] for row in rows]


class Collected:
    def __init__(self) -> None:
        self.results: list[Vectors | BaseException] = []
        self.done = threading.Event()

    def __call__(self, result: Vectors | BaseException) -> None:
        self.results.append(result)
        self.done.set()


@pytest.fixture
def model() -> FakeModel:
    return FakeModel()


@pytest.fixture
def batcher(model: FakeModel) -> Iterator[EmbeddingBatcher]:
    b = EmbeddingBatcher(model, max_batch_tokens=64, max_batch_rows=8, max_queue_len=3)
    yield b
    model.release.set()
    b.stop()


def _submit(batcher: EmbeddingBatcher, *rows: list[int]) -> Collected:
    collected = Collected()
    batcher.submit(EmbedRequest(list(rows), collected))
    return collected


def test_requests_that_arrive_while_a_batch_runs_run_together_in_the_next(
    batcher: EmbeddingBatcher, model: FakeModel
) -> None:
    first = _submit(batcher, [1, 2])
    assert model.started.wait(10)  # the worker holds the first batch
    second, third = _submit(batcher, [5, 6, 7]), _submit(batcher, [9], [10, 11])
    model.release.set()
    for each in (first, second, third):
        assert each.done.wait(10)
    assert model.batches == [[[1, 2]], [[5, 6, 7], [9], [10, 11]]]
    assert first.results == [[[1.0, 2.0]]]
    assert second.results == [[[5.0, 3.0]]] and third.results == [[[9.0, 1.0], [10.0, 2.0]]]
    stats = batcher.stats()
    assert stats.requests_total == 3 and stats.prompt_tokens_total == 8 and stats.num_waiting == 0


def test_a_batch_is_bounded_by_padded_tokens(model: FakeModel) -> None:
    b = EmbeddingBatcher(model, max_batch_tokens=8, max_batch_rows=8, max_queue_len=4)
    try:
        model.release.clear()
        first = _submit(b, [1])
        assert model.started.wait(10)
        # Rows of 4 tokens: two fill the 8 padded tokens, so three rows make two batches.
        wide = _submit(b, [2, 0, 0, 0], [3, 0, 0, 0], [4, 0, 0, 0])
        model.release.set()
        assert first.done.wait(10) and wide.done.wait(10)
        assert [len(batch) for batch in model.batches] == [1, 2, 1]
        assert wide.results == [[[2.0, 4.0], [3.0, 4.0], [4.0, 4.0]]]
    finally:
        b.stop()


def test_a_full_queue_is_refused_with_the_overloaded_error(
    batcher: EmbeddingBatcher, model: FakeModel
) -> None:
    _submit(batcher, [1])
    assert model.started.wait(10)  # running, so no longer waiting
    for i in range(3):
        _submit(batcher, [i + 2])
    with pytest.raises(QueueFullError):
        _submit(batcher, [9])
    assert batcher.stats().num_waiting == 3


def test_a_dropped_request_never_runs_and_is_never_answered(
    batcher: EmbeddingBatcher, model: FakeModel
) -> None:
    first = _submit(batcher, [1])
    assert model.started.wait(10)
    dropped, kept = Collected(), Collected()
    request = EmbedRequest([[7]], dropped)
    batcher.submit(request)
    batcher.submit(EmbedRequest([[8]], kept))
    batcher.drop(request)
    model.release.set()
    assert first.done.wait(10) and kept.done.wait(10)
    assert [row for batch in model.batches for row in batch] == [[1], [8]]
    assert dropped.results == []


def test_a_failing_batch_fails_its_requests_and_the_next_batch_runs(
    batcher: EmbeddingBatcher, model: FakeModel
) -> None:
    model.release.set()
    failing = _submit(batcher, [-1])
    assert failing.done.wait(10)
    assert isinstance(failing.results[0], RequestFailedError)
    fine = _submit(batcher, [3])
    assert fine.done.wait(10) and fine.results == [[[3.0, 1.0]]]


def test_stop_fails_what_waits_and_refuses_new_requests(model: FakeModel) -> None:
    b = EmbeddingBatcher(model, max_batch_tokens=64, max_batch_rows=8, max_queue_len=4)
    running = _submit(b, [1])
    assert model.started.wait(10)
    waiting = _submit(b, [2])
    threading.Timer(0.2, model.release.set).start()  # lets the running batch end after stop() began
    b.stop()
    assert isinstance(waiting.results[0], EngineDeadError)
    assert len(running.results) == 1  # answered once: failed by stop, never again by its batch
    with pytest.raises(EngineDeadError):
        _submit(b, [3])


async def test_a_cancelled_caller_drops_its_pending_request(model: FakeModel) -> None:
    """Through EmbeddingEngine.embed's asyncio bridge (its batcher swapped for one on the fake model)."""
    from inference.frontends.embedding.engine import EmbeddingEngine

    engine = object.__new__(EmbeddingEngine)
    engine._accepting = True
    engine.max_model_len, engine._vocab = 16, 100
    engine._batcher = EmbeddingBatcher(model, max_batch_tokens=64, max_batch_rows=8, max_queue_len=4)
    try:
        first = asyncio.create_task(engine.embed([[1]]))
        assert await asyncio.to_thread(model.started.wait, 10)
        cancelled = asyncio.create_task(engine.embed([[7]]))
        kept = asyncio.create_task(engine.embed([[8, 9]]))
        await asyncio.sleep(0)  # both submitted
        assert engine.stats().num_waiting == 2
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert engine.stats().num_waiting == 1
        model.release.set()
        assert await first == [[1.0, 1.0]] and await kept == [[8.0, 2.0]]
        assert [row for batch in model.batches for row in batch] == [[1], [8, 9]]
        with pytest.raises(ValueError, match="at least one token"):
            await engine.embed([[]])
    finally:
        model.release.set()
        engine._batcher.stop()
