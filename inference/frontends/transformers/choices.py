"""One choice of a request on the transformers engine: its sampled tokens folded into our output.

transformers' continuous batching reports each request's generated tokens so far; the text, stop strings,
stop token ids and finish reasons are decided here as the native engine decides them (inference.core.request),
so a reply reads the same whichever in-process engine produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference.core.detokenizer import IncrementalDetokenizer
from inference.outputs import CompletionOutput, FinishReason
from inference.sampling_params import SamplingParams


@dataclass(slots=True)
class TransformersChoice:
    index: int
    detokenizer: IncrementalDetokenizer
    token_ids: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    sent_ids: int = 0

    @classmethod
    def start(
        cls, index: int, tokenizer: Any, prompt_ids: list[int], params: SamplingParams
    ) -> TransformersChoice:
        detokenizer = IncrementalDetokenizer(
            tokenizer, prompt_ids, skip_special_tokens=params.skip_special_tokens, stop=params.stop
        )
        return cls(index, detokenizer)

    def fold(
        self,
        generated: list[int],
        *,
        finished: bool,
        params: SamplingParams,
        eos_token_ids: set[int],
        max_tokens: int,
    ) -> bool:
        """Take in the tokens generated so far; True once this choice has finished (the engine may go on
        sampling a choice that a stop string ended here: the caller cancels it)."""
        for token_id in generated[len(self.token_ids) :]:
            if self.finish_reason is not None:
                break
            self.token_ids.append(token_id)
            self.finish_reason = self._check(token_id, params, eos_token_ids, max_tokens)
        if finished and self.finish_reason is None:
            # The engine stopped it: at an EOS it was told of (checked above), else at max_new_tokens.
            self.finish_reason = "length"
        return self.finish_reason is not None

    def _check(
        self, token_id: int, params: SamplingParams, eos_token_ids: set[int], max_tokens: int
    ) -> FinishReason | None:
        if not params.ignore_eos and token_id in eos_token_ids:
            return "stop"  # the EOS token's text is not part of the output
        if token_id in params.stop_token_ids:
            self.stop_reason = token_id
            return "stop"
        stop = self.detokenizer.add_token(token_id)
        if stop is not None:
            self.stop_reason = stop
            return "stop"
        return "length" if len(self.token_ids) >= max_tokens else None

    def output(self) -> CompletionOutput:
        """This choice with the deltas since the previous call; marks what it reports as sent."""
        done = self.finish_reason is not None
        delta_text = self.detokenizer.take_delta(finished=done)
        sent, self.sent_ids = self.sent_ids, len(self.token_ids)
        return CompletionOutput(
            index=self.index,
            text=self.detokenizer.emitted_text,
            token_ids=list(self.token_ids),
            delta_text=delta_text,
            delta_token_ids=self.token_ids[sent:],
            logprobs=None,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )
