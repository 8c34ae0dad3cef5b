"""A remote engine's replies as the engine's outputs: each choice's upstream events folded into the
cumulative text, token ids and logprobs a RequestOutput carries.

The upstream's completions API names no token ids: each delta's ids are the local tokenizer's reading of
the delta text, and when a choice ends its count is set to the upstream's own usage figure (the EOS token
or a stop string's tokens leave no text), since quotas and the request log count len(token_ids).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from inference.frontends.remote.upstream import parse_logprobs
from inference.outputs import CompletionOutput, FinishReason, TokenLogprobs

_FINISH: dict[str, FinishReason] = {"length": "length", "abort": "abort"}  # anything else ends as "stop"


@dataclass(slots=True)
class ChoiceState:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprobs] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_reason: str | int | None = None
    # The upstream's finish reason, applied when its stream ends: the usage event with the exact token
    # count comes after it.
    pending_finish: FinishReason | None = None
    sent_chars: int = 0
    sent_ids: int = 0

    def apply(
        self, event: dict[str, Any], tokenizer: Any, eos_token_ids: set[int], *, logprobs: int | None
    ) -> bool:
        """Fold one upstream event in; True when there is something new to send."""
        if event.get("done"):
            self.finish_reason = self.pending_finish or "stop"
            return True
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.token_ids = _fitted(self.token_ids, usage["completion_tokens"], eos_token_ids)
        changed = False
        for item in event.get("choices") or []:
            delta = str(item.get("text") or "")
            if delta:
                self.text += delta
                self.token_ids.extend(tokenizer.encode(delta, add_special_tokens=False))
                changed = True
            if logprobs is not None and isinstance(item.get("logprobs"), dict):
                self.logprobs.extend(parse_logprobs(item["logprobs"]))
            if item.get("finish_reason"):
                self.pending_finish = _FINISH.get(str(item["finish_reason"]), "stop")
                stop = item.get("stop_reason")
                self.stop_reason = stop if isinstance(stop, str | int) else None
        return changed

    def output(self, *, logprobs: bool) -> CompletionOutput:
        """This choice with the deltas since the previous call; marks what it reports as sent."""
        output = CompletionOutput(
            index=self.index,
            text=self.text,
            token_ids=list(self.token_ids),
            delta_text=self.text[self.sent_chars :],
            delta_token_ids=self.token_ids[self.sent_ids :],
            logprobs=list(self.logprobs) if logprobs else None,
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
        )
        self.sent_chars, self.sent_ids = len(self.text), len(self.token_ids)
        return output


def _fitted(ids: list[int], count: int, eos_token_ids: set[int]) -> list[int]:
    """`ids` at the upstream's count: a short list is what left no text (EOS, a stop string's tokens)."""
    if len(ids) >= count:
        return ids[:count]
    filler = min(eos_token_ids) if eos_token_ids else 0
    return ids + [filler] * (count - len(ids))
