"""Failure isolation for one engine step: find the requests whose forward pass or sampling raised.

A step batches many requests, so one bad request would otherwise fail all of them, and an exception
that escaped the step loop would end the engine for everyone. When the batched call raises, it is
retried one chunk (or one row) at a time: the requests that still fail alone are ended through `fail`,
and the rest of the batch goes on. Only the failure path pays for the retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

from inference.core.model_io import ScheduledChunk, StepLogits
from inference.core.sampler import SampleResult
from inference.core.scheduler import SchedulerOutput
from inference.core.sequence import Sequence
from inference.errors import EngineBrokenError

# (request id, the exception it raised): ends that request alone.
FailRequest = Callable[[str, BaseException], None]


class _Executes(Protocol):
    def execute(self, chunks: list[ScheduledChunk]) -> StepLogits: ...


class _Samples(Protocol):
    def __call__(self, logits: torch.Tensor, seqs: list[Sequence]) -> SampleResult: ...


def execute_isolating(
    runner: _Executes, scheduled: SchedulerOutput, error: BaseException, fail: FailRequest
) -> StepLogits | None:
    """After the batched forward raised `error`: fail the culprits, drop them from `scheduled`, run the rest.

    Raises EngineBrokenError when every chunk runs alone but not together (the engine, not a request, is
    at fault); whatever the final batched call raises propagates the same way.
    """
    request_ids = {seq.request_id for seq in scheduled.seqs}
    culprits: set[str] = set()
    if len(request_ids) == 1:
        culprits = request_ids
        fail(scheduled.seqs[0].request_id, error)
    else:
        for seq, chunk in zip(scheduled.seqs, scheduled.chunks, strict=True):
            if seq.request_id in culprits:
                continue
            try:
                runner.execute([chunk])
            except Exception as exc:
                culprits.add(seq.request_id)
                fail(seq.request_id, exc)
    if not culprits:
        raise EngineBrokenError("a batched step failed although each of its requests runs alone") from error
    keep = [i for i, seq in enumerate(scheduled.seqs) if seq.request_id not in culprits]
    scheduled.seqs = [scheduled.seqs[i] for i in keep]
    scheduled.num_tokens = [scheduled.num_tokens[i] for i in keep]
    scheduled.chunks = [scheduled.chunks[i] for i in keep]
    return runner.execute(scheduled.chunks) if keep else None


def sample_isolating(
    sampler: _Samples, logits: torch.Tensor, seqs: list[Sequence], fail: FailRequest
) -> tuple[list[Sequence], SampleResult]:
    """After batched sampling raised: sample row by row; rows that raise alone end their request.

    Returns the surviving sequences and their samples, in the same order.
    """
    failed: set[str] = set()
    kept: list[Sequence] = []
    result = SampleResult([], [])
    for row, seq in enumerate(seqs):
        if seq.request_id in failed:
            continue
        try:
            one = sampler(logits[row : row + 1], [seq])
        except Exception as exc:
            failed.add(seq.request_id)
            fail(seq.request_id, exc)
            continue
        kept.append(seq)
        result.token_ids.extend(one.token_ids)
        result.logprobs.extend(one.logprobs)
    # A sibling sampled before its request failed must not get a token either.
    survivors = [i for i, seq in enumerate(kept) if seq.request_id not in failed]
    return (
        [kept[i] for i in survivors],
        SampleResult([result.token_ids[i] for i in survivors], [result.logprobs[i] for i in survivors]),
    )
