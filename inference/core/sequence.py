"""Sequence: one generated completion's tokens, KV block table, progress and finish state."""

from __future__ import annotations

import enum
import itertools

import torch

from inference.outputs import FinishReason, TokenLogprobs
from inference.sampling_params import SamplingParams

_seq_ids = itertools.count()

# A request's logit_bias as (token ids, biases) tensors on the CPU.
LogitBias = tuple[torch.Tensor, torch.Tensor]


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def is_finished(self) -> bool:
        return self not in (SequenceStatus.WAITING, SequenceStatus.RUNNING)

    @property
    def finish_reason(self) -> FinishReason | None:
        reasons: dict[SequenceStatus, FinishReason] = {
            SequenceStatus.FINISHED_STOPPED: "stop",
            SequenceStatus.FINISHED_LENGTH: "length",
            SequenceStatus.FINISHED_ABORTED: "abort",
        }
        return reasons.get(self)


class Sequence:
    """Mutable per-completion state shared by the scheduler, block manager and sampler."""

    __slots__ = (
        "arrival_time",
        "block_hashes",
        "block_table",
        "generator",
        "index",
        "logit_bias",
        "logprobs",
        "max_tokens",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_prompt_tokens",
        "num_released_blocks",
        "params",
        "priority",
        "request_id",
        "seq_id",
        "status",
        "stop_reason",
        "token_ids",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        max_tokens: int,
        arrival_time: float,
        priority: int = 0,
        index: int = 0,
        logit_bias: LogitBias | None = None,
    ) -> None:
        self.seq_id = next(_seq_ids)
        self.request_id = request_id
        self.index = index
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.max_tokens = max_tokens
        self.arrival_time = arrival_time
        self.priority = priority
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []  # chained hash of each full, computed block, in order
        # Leading blocks handed back because every layer's window has passed them: their ids stay in the
        # table (positions still index it, and the kernels mask those keys), but they are no longer ours.
        self.num_released_blocks = 0
        self.num_computed_tokens = 0  # tokens whose KV is in the cache (computed or prefix hits)
        self.num_cached_tokens = 0  # prefix-cache hits at first admission
        self.stop_reason: str | int | None = None
        self.logprobs: list[TokenLogprobs] = []
        self.generator = _make_generator(params.seed, index)
        # Built once per request, not on every step: forks pass the root's tensors on.
        self.logit_bias = logit_bias if logit_bias is not None else _logit_bias_tensors(params)

    def __len__(self) -> int:
        return len(self.token_ids)

    def __repr__(self) -> str:
        return (
            f"Sequence(id={self.seq_id}, req={self.request_id!r}, idx={self.index}, len={len(self)}, "
            f"computed={self.num_computed_tokens}, blocks={self.block_table}, {self.status.value})"
        )

    @property
    def sort_key(self) -> tuple[int, float, int]:
        """Lower runs first: priority, then arrival (FCFS), then creation order."""
        return (self.priority, self.arrival_time, self.seq_id)

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_decoding(self) -> bool:
        return self.num_output_tokens > 0 and self.num_uncomputed_tokens == 1

    @property
    def is_replaying(self) -> bool:
        """Recomputed after a preemption and past its prompt: generated tokens are left to compute again
        before the last one, which decodes."""
        return self.num_computed_tokens >= self.num_prompt_tokens and self.num_uncomputed_tokens > 1

    def fork(self, index: int) -> Sequence:
        """A sibling for n > 1 from this prompt; the block manager shares the prompt blocks."""
        return Sequence(
            self.request_id,
            self.token_ids[: self.num_prompt_tokens],
            self.params,
            max_tokens=self.max_tokens,
            arrival_time=self.arrival_time,
            priority=self.priority,
            index=index,
            logit_bias=self.logit_bias,
        )


def _logit_bias_tensors(params: SamplingParams) -> LogitBias | None:
    if not params.logit_bias:
        return None
    ids = torch.tensor(list(params.logit_bias), dtype=torch.long)
    return ids, torch.tensor(list(params.logit_bias.values()), dtype=torch.float32)


def _make_generator(seed: int | None, index: int) -> torch.Generator | None:
    """A per-completion generator makes seeded results independent of the rest of the batch."""
    if seed is None:
        return None
    generator = torch.Generator()
    # Siblings of one request (n > 1) must differ, yet stay reproducible from the one seed.
    generator.manual_seed((seed * 1_000_003 + index) % (2**63))
    return generator
