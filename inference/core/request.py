"""Request: one prompt, its n sibling sequences, and the bookkeeping that turns them into outputs."""

from __future__ import annotations

from typing import Any

from inference.core.detokenizer import IncrementalDetokenizer
from inference.core.sequence import Sequence, SequenceStatus
from inference.outputs import CompletionOutput, RequestMetrics, RequestOutput, TokenLogprobs
from inference.sampling_params import SamplingParams


class Request:
    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        max_tokens: int,
        arrival_time: float,
        priority: int,
        tokenizer: Any,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.metrics = RequestMetrics(arrival_time=arrival_time)
        self.prompt_logprobs: list[TokenLogprobs | None] | None = (
            [None] if params.prompt_logprobs is not None else None
        )
        self._tokenizer = tokenizer
        self.seqs: dict[int, Sequence] = {}
        self._detok: dict[int, IncrementalDetokenizer] = {}
        self._sent_tokens: dict[int, int] = {}  # output tokens already reported, per index
        self.last_token_time: float | None = None
        self.aborted = False
        root = Sequence(
            request_id,
            prompt_token_ids,
            params,
            max_tokens=max_tokens,
            arrival_time=arrival_time,
            priority=priority,
        )
        self.track(root)

    @property
    def root(self) -> Sequence:
        return self.seqs[0]

    @property
    def finished(self) -> bool:
        if self.aborted:
            return True
        return len(self.seqs) == self.params.n and all(s.status.is_finished for s in self.seqs.values())

    def track(self, seq: Sequence) -> None:
        self.seqs[seq.index] = seq
        self._detok[seq.index] = IncrementalDetokenizer(
            self._tokenizer,
            self.prompt_token_ids,
            skip_special_tokens=self.params.skip_special_tokens,
            stop=self.params.stop,
        )
        self._sent_tokens[seq.index] = 0

    def check_stop(
        self, seq: Sequence, token_id: int, *, eos_token_ids: set[int], max_model_len: int
    ) -> SequenceStatus | None:
        """Detokenize seq's new token and say whether (and how) it finished; sets stop_reason."""
        params = seq.params
        may_stop = seq.num_output_tokens >= params.min_tokens
        if may_stop and not params.ignore_eos and token_id in eos_token_ids:
            return SequenceStatus.FINISHED_STOPPED  # the EOS token's text is not part of the output
        if may_stop and token_id in params.stop_token_ids:
            seq.stop_reason = token_id
            return SequenceStatus.FINISHED_STOPPED
        stop = self._detok[seq.index].add_token(token_id, check_stop=may_stop)
        if stop is not None:
            seq.stop_reason = stop
            return SequenceStatus.FINISHED_STOPPED
        if seq.num_output_tokens >= seq.max_tokens or len(seq) >= max_model_len:
            return SequenceStatus.FINISHED_LENGTH
        return None

    def make_output(self) -> RequestOutput:
        """A RequestOutput with deltas since the previous call; marks what it reports as sent."""
        completions = []
        for index in sorted(self.seqs):
            seq = self.seqs[index]
            done = seq.status.is_finished
            output_ids = seq.output_token_ids
            sent = self._sent_tokens[index]
            self._sent_tokens[index] = len(output_ids)
            detok = self._detok[index]
            delta_text = detok.take_delta(finished=done)
            completions.append(
                CompletionOutput(
                    index=index,
                    text=detok.emitted_text,
                    token_ids=output_ids,
                    delta_text=delta_text,
                    delta_token_ids=output_ids[sent:],
                    logprobs=list(seq.logprobs) if self.params.logprobs is not None else None,
                    finish_reason=seq.status.finish_reason,
                    stop_reason=seq.stop_reason,
                )
            )
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            prompt_logprobs=list(self.prompt_logprobs) if self.prompt_logprobs is not None else None,
            outputs=completions,
            finished=self.finished,
            metrics=RequestMetrics(
                self.metrics.arrival_time,
                self.metrics.first_scheduled_time,
                self.metrics.first_token_time,
                self.metrics.finished_time,
                self.metrics.num_cached_tokens,
            ),
        )
