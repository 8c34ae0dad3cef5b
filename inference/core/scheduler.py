"""Continuous batching under a token budget: running sequences first, then waiting ones.

Each step, running sequences that are decoding get their one token before anything else, so decode is
never starved by a long prompt; then running prefills continue (chunked), then waiting sequences are
admitted in (priority, arrival) order while tokens, sequence slots and KV blocks last. When a running
sequence cannot get a block, the lowest-priority, latest-arrived running sequence is preempted: its
blocks are freed and it goes back to waiting to be recomputed from its tokens.

Latency budget (`max_step_latency_ms`): a step that carries decode rows lasts as long as its prefill chunk,
and on a CPU a full max_num_batched_tokens chunk takes seconds, so every running stream would stall that
long. While any sequence is decoding, prefill therefore gets only the tokens that fit the target, from an
online estimate of step cost (StepCostModel, fed by the engine through `record_step`), in which a prefill
token costs more the deeper into its prompt it sits:

    prefill tokens = what fits (0.8 x target - fixed) at the chunk's depth, at least _MIN_PREFILL_CHUNK
                     (so prompts progress), at most max_num_batched_tokens - decode rows.

With no decode running, or before any step has been measured, prefill uses the whole token budget.

Speculation (inference.core.speculative): a decoding sequence may carry draft tokens in its chunk, from what
the budget and free KV blocks leave once every decode has its token; drafts never preempt anyone.

Over 300 lines: admission, chunked prefill under the latency budget, drafts and preemption all decide
from one step's shared budget and free blocks; split apart, each would re-derive the others' share.

Over 300 lines: the step cost model is the one consumer of what this scheduler plans, and it sits beside it.
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from inference.config import SchedulerConfig
from inference.core.block_manager import BlockManager
from inference.core.model_io import ScheduledChunk
from inference.core.sequence import Sequence, SequenceStatus
from inference.core.speculative import Drafter

# Prefill's floor under the latency budget (tokens; at least one block): even when decode rows alone
# exceed the target, prompts keep moving. Small, because on CPU a chunk deep in an 8k prompt costs several
# ms per token (the chunk re-reads its whole context), so 32 tokens there already exceed 250 ms.
_MIN_PREFILL_CHUNK = 16
# Steps are planned this far under the target: the target is a bound on the stall running streams see,
# and the cost model's error and the machine's noise (measured: up to ~20% over a plan) must fit under it.
_PLAN_FRACTION = 0.8


class StepCostModel:
    """Online step cost: seconds ~= fixed + tokens * per_token(context), per_token(c) = a + b * c.

    fixed is a moving average over steps without prefill (decode rows, sampling, overhead). A prefill
    token's cost grows with the context it attends to (a chunk deep in a long prompt re-reads all of it),
    so per-token costs are regressed on the mean context of the step's prefill tokens, over exponentially
    weighted moments: with one context seen, b is 0 and per_token is a plain moving average. A step with
    fewer than full_weight_tokens prefill tokens moves the moments proportionally less: the fixed cost's
    noise, divided by a few tokens, would swamp it.
    """

    def __init__(self, alpha_fixed: float = 0.2, alpha: float = 0.5, full_weight_tokens: int = 64) -> None:
        self.alpha_fixed = alpha_fixed
        self.alpha = alpha
        self.full_weight_tokens = full_weight_tokens
        self.fixed_s: float | None = None
        # Weighted moments of (context x, per-token seconds y): E[x], E[y], E[x^2], E[xy].
        self._moments: list[float] | None = None

    def observe(self, prefill_tokens: int, seconds: float, context: float = 0.0) -> None:
        """A step's duration; context: the mean number of earlier tokens its prefill tokens attend to."""
        if prefill_tokens == 0:
            old = self.fixed_s
            self.fixed_s = seconds if old is None else old + self.alpha_fixed * (seconds - old)
            return
        # Until a decode-only step is seen, the whole step counts as prefill: a conservative estimate.
        y = max(seconds - (self.fixed_s or 0.0), 0.0) / prefill_tokens
        sample = [context, y, context * context, context * y]
        if self._moments is None:
            self._moments = sample
            return
        weight = self.alpha * min(1.0, prefill_tokens / self.full_weight_tokens)
        self._moments = [m + weight * (v - m) for m, v in zip(self._moments, sample, strict=True)]

    def _line(self) -> tuple[float, float] | None:
        """(a, b) of per_token(c) = a + b * c; b is never negative (more context never costs less)."""
        if self._moments is None:
            return None
        mx, my, mxx, mxy = self._moments
        variance = mxx - mx * mx
        slope = (mxy - mx * my) / variance if variance > 1e-6 * max(1.0, mxx) else 0.0
        slope = max(slope, 0.0)
        return my - slope * mx, slope

    @property
    def per_token_s(self) -> float | None:
        """Seconds per prefill token at the mean context seen so far."""
        return None if self._moments is None else self._moments[1]

    def prefill_budget(self, target_s: float, context: int = 0) -> int | None:
        """Prefill tokens that keep a step near target_s when its chunk starts `context` tokens into its
        prompt; None when prefill was never measured."""
        line = self._line()
        if line is None:
            return None
        spare = target_s - (self.fixed_s or 0.0)
        if spare <= 0:
            return 0
        a, b = line
        # n tokens from position p cost n * (a + b * (p + n / 2)): solve (b/2) n^2 + (a + b p) n = spare.
        linear = a + b * context
        if b <= 0:
            return round(spare / linear) if linear > 0 else 1 << 30
        root = 2 * spare / (linear + math.sqrt(linear * linear + 2 * b * spare))
        return round(root)


@dataclass(slots=True)
class SchedulerOutput:
    """Plain data for one step: which sequences run and how many tokens each computes."""

    seqs: list[Sequence] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    chunks: list[ScheduledChunk] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)
    num_decodes: int = 0  # rows that decode; the rest of sum(num_tokens) is drafts and prefill
    drafts: dict[int, list[int]] = field(default_factory=dict)  # seq_id -> draft tokens its chunk verifies
    prefill_context: float = 0.0  # sum over prefill tokens of the context each attends to
    created_at: float = field(default_factory=time.time)  # when scheduled: ends the request's queue time
    started_at: float = field(default_factory=time.perf_counter)  # monotonic start, to time the step

    @property
    def is_empty(self) -> bool:
        return not self.seqs


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, block_manager: BlockManager, drafter: Drafter | None = None
    ) -> None:
        self.config = config
        self.block_manager = block_manager
        self.drafter = drafter
        self.waiting: list[Sequence] = []  # kept sorted by sort_key
        self.running: list[Sequence] = []  # kept sorted by sort_key; the tail is preempted first
        self.num_preemptions = 0
        self.cost = StepCostModel()
        # Async scheduling: running sequences whose token still in flight ends them whatever it is
        # (max_tokens, max_model_len); the next schedule() gives them no row. Cleared by each schedule().
        self.finishing: set[int] = set()

    # ---- queue management -------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        seq.status = SequenceStatus.WAITING
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def finish_requests(self, seqs: Iterable[Sequence], status: SequenceStatus) -> None:
        """The one exit path for finish and abort: set the status, leave the queues, free the blocks."""
        if not status.is_finished:
            raise ValueError(f"{status} is not a finished status")
        for seq in seqs:
            if seq.status.is_finished:
                continue
            queue = self.running if seq.status is SequenceStatus.RUNNING else self.waiting
            if seq in queue:
                queue.remove(seq)
            seq.status = status
            self.block_manager.free(seq)
            if self.drafter is not None:
                self.drafter.forget(seq)

    # ---- scheduling -------------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        out = SchedulerOutput()
        decodes = [s for s in self.running if self._row(s) and s.seq_id not in self.finishing]
        prefills = [s for s in self.running if not self._row(s)]
        self.finishing.clear()
        budget = self._token_budget(len(decodes))
        if self.block_manager.kv_window is not None:
            for seq in self.running:
                self.block_manager.release_outside_window(seq)
        # Drafts get what is left once every decode has its token and waiting prompts their floor.
        undrafted = len(decodes)
        prefill_floor = max(_MIN_PREFILL_CHUNK, self.block_manager.block_size)
        reserve = prefill_floor if prefills or self.waiting else 0
        for seq in decodes + prefills:
            if budget == 0:
                break
            if seq.status is not SequenceStatus.RUNNING:
                continue  # preempted earlier in this loop
            draft: list[int] = []
            if self._row(seq):
                undrafted -= 1
                if seq.is_decoding:  # a replayed row's next token is known: nothing to draft
                    draft = self._draft(seq, budget - 1 - undrafted - reserve, undrafted)
            num_new = min(self._chunk_limit(seq), budget) + len(draft)
            if not self.config.enable_chunked_prefill and num_new < seq.num_uncomputed_tokens:
                continue
            if self._make_room(seq, num_new, out):
                self.block_manager.append(seq, num_new)
                self._emit(out, seq, num_new, draft)
                budget -= num_new
        if not out.preempted:  # admitting while evicting would just thrash
            self._admit(out, budget)
        return out

    def _row(self, seq: Sequence) -> bool:
        """Whether seq's next chunk is a decoding row: its one new token, or a replayed generated one."""
        return seq.is_decoding or (self.config.replay_outputs_as_rows and seq.is_replaying)

    def _chunk_limit(self, seq: Sequence, start: int | None = None) -> int:
        """The most tokens seq's next chunk may take from `start` (its computed count by default).

        Where decoding rows round apart from prompt chunks, a recomputed sequence takes its prompt as a
        chunk and then its generated tokens one per step, as they were computed first: its answer then
        goes on as it would have without the preemption (docs/design/determinism.md).
        """
        start = seq.num_computed_tokens if start is None else start
        left = len(seq.token_ids) - start
        if not self.config.replay_outputs_as_rows or seq.num_output_tokens == 0:
            return left
        return seq.num_prompt_tokens - start if start < seq.num_prompt_tokens else 1

    def _draft(self, seq: Sequence, limit: int, later_decodes: int) -> list[int]:
        """Draft tokens for a decoding seq, only as many as fit in KV blocks nobody needs: drafts never
        preempt, and each later decode may still need one fresh block for its token."""
        if self.drafter is None or limit < 1:
            return []
        manager = self.block_manager
        spare_blocks = max(manager.num_free_blocks - later_decodes, 0)
        free_slots = (len(seq.block_table) + spare_blocks) * manager.block_size
        return self.drafter.draft(seq, min(limit, free_slots - seq.num_computed_tokens - 1))

    def _token_budget(self, num_decodes: int) -> int:
        """This step's tokens: all of max_num_batched_tokens, unless decodes run under a latency target."""
        full = self.config.max_num_batched_tokens
        target_ms = self.config.max_step_latency_ms
        # Without chunking a prompt runs whole or not at all, so a smaller budget would only starve it.
        if not num_decodes or not target_ms or not self.config.enable_chunked_prefill:
            return full
        prefill = self.cost.prefill_budget(target_ms / 1000 * _PLAN_FRACTION, self._next_prefill_start())
        if prefill is None:
            return full
        floor = max(_MIN_PREFILL_CHUNK, self.block_manager.block_size)
        return min(full, num_decodes + max(prefill, floor))

    def _next_prefill_start(self) -> int:
        """Where the prompt that gets this step's prefill tokens first stands (how deep its chunk goes)."""
        prefilling = next((s for s in self.running if not s.is_decoding), None)
        if prefilling is not None:
            return prefilling.num_computed_tokens
        return self.waiting[0].num_computed_tokens if self.waiting else 0

    def record_step(self, out: SchedulerOutput, seconds: float) -> None:
        """The engine reports how long a scheduled step took (schedule to outputs), to size later chunks."""
        if out.is_empty or seconds <= 0:
            return
        prefill = sum(out.num_tokens) - out.num_decodes - sum(map(len, out.drafts.values()))
        context = out.prefill_context / prefill if prefill else 0.0
        self.cost.observe(prefill, seconds, context)

    def _make_room(self, seq: Sequence, num_new: int, out: SchedulerOutput) -> bool:
        """Preempt from the tail until seq can grow; False if seq itself had to go."""
        while not self.block_manager.can_append(seq, num_new):
            scheduled = set(map(id, out.seqs))
            victims = [s for s in self.running if id(s) not in scheduled and s is not seq]
            victim = victims[-1] if victims else seq
            self._preempt(victim, out)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence, out: SchedulerOutput) -> None:
        self.running.remove(seq)
        self.block_manager.free(seq)
        self.num_preemptions += 1
        out.preempted.append(seq)
        self.add(seq)

    def _admit(self, out: SchedulerOutput, budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            cached = [] if seq.block_table else self.block_manager.match_prefix(seq)
            start = (
                seq.num_computed_tokens if seq.block_table else len(cached) * self.block_manager.block_size
            )
            num_new = min(self._chunk_limit(seq, start), budget)
            if not self.config.enable_chunked_prefill and num_new < self._chunk_limit(seq, start):
                break
            if not self.block_manager.can_allocate(seq, cached, start + num_new):
                break
            self.block_manager.allocate(seq, cached, start + num_new)
            if seq.num_output_tokens == 0 and not seq.num_cached_tokens:
                seq.num_cached_tokens = len(cached) * self.block_manager.block_size
            self.waiting.pop(0)
            seq.status = SequenceStatus.RUNNING
            bisect.insort(self.running, seq, key=lambda s: s.sort_key)
            self._emit(out, seq, num_new)
            budget -= num_new

    def _emit(
        self, out: SchedulerOutput, seq: Sequence, num_new: int, draft: list[int] | None = None
    ) -> None:
        row = self._row(seq)
        out.num_decodes += row
        if not row:
            out.prefill_context += num_new * (seq.num_computed_tokens + num_new / 2)
        out.seqs.append(seq)
        out.num_tokens.append(num_new)
        if draft:
            # The drafts ride on a copy of the tokens (the sequence holds verified tokens only), and the
            # verifier needs the logits at every position of the chunk.
            out.drafts[seq.seq_id] = draft
            out.chunks.append(
                ScheduledChunk(
                    seq.token_ids + draft,
                    seq.num_computed_tokens,
                    num_new,
                    seq.block_table,
                    True,
                    decoding=True,
                )
            )
            return
        out.chunks.append(
            ScheduledChunk(
                token_ids=seq.token_ids,
                start=seq.num_computed_tokens,
                num_tokens=num_new,
                block_table=seq.block_table,
                return_all_logits=seq.params.prompt_logprobs is not None
                and seq.num_computed_tokens < seq.num_prompt_tokens,
                decoding=row,
            )
        )

    # ---- after the forward pass -------------------------------------------------------------------
    def update_computed(self, out: SchedulerOutput) -> list[bool]:
        """Advance progress; returns, per scheduled seq, whether it reached its end and needs a sample.

        A drafted row advances over its last real token only: the engine advances it over the drafts
        that verification accepts (`accept_drafts`), so no block holding an unverified token is cached.
        """
        done = []
        for seq, num_new in zip(out.seqs, out.num_tokens, strict=True):
            seq.num_computed_tokens += num_new - len(out.drafts.get(seq.seq_id, ()))
            self.block_manager.cache_full_blocks(seq)
            done.append(seq.num_computed_tokens == len(seq.token_ids))
        return done

    def accept_draft_token(self, seq: Sequence) -> None:
        """The token at seq's next position was an accepted draft: its KV (written by the verification
        pass over the very same token) is now final."""
        seq.num_computed_tokens += 1

    def settle_drafts(self, seq: Sequence) -> None:
        """After a drafted row's tokens are appended: cache its now-verified full blocks and free the blocks
        that held only rejected drafts (their slots are rewritten when the sequence gets that far)."""
        if seq.status.is_finished:
            return  # its blocks went back when it finished
        self.block_manager.cache_full_blocks(seq)
        self.block_manager.trim(seq, len(seq.token_ids))

    def add_running_fork(self, parent: Sequence, child: Sequence) -> None:
        """Queue an n > 1 sibling that shares parent's prompt blocks; it recomputes only the tail."""
        self.block_manager.fork(parent, child)
        child.num_cached_tokens = parent.num_cached_tokens
        self.add(child)
