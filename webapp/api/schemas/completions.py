"""/v1/completions request and response schemas."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, StrictBool, ValidationInfo, field_validator, model_validator

from inference.api import DEFAULT_MAX_QUEUE_LEN, MAX_INT32
from webapp.api.schemas.common import SamplingFields, Usage, well_formed
from webapp.serving.sampling import ChoiceCount, TopLogprobs

# A string, a list of strings, a list of token ids, or a list of token-id lists.
Prompt = str | list[str] | list[int] | list[list[int]]

DEFAULT_COMPLETION_TOKENS = 16
# Sequences (prompts x n) one request may ask for. Each prompt is one engine request, and the engine's
# queue holds this many by default (max_queue_len): a request past it could never be admitted at once,
# and a client told "503, retry" would retry forever. Servers with a smaller queue refuse earlier (services).
MAX_SEQUENCES = DEFAULT_MAX_QUEUE_LEN


def prompt_count(prompt: Prompt) -> int:
    """How many prompts (engine requests) `prompt` holds, without tokenizing anything."""
    if isinstance(prompt, str) or (prompt and all(isinstance(p, int) for p in prompt)):
        return 1
    return len(prompt)


class CompletionRequest(SamplingFields):
    prompt: Prompt
    echo: StrictBool = False
    logprobs: TopLogprobs | None = None
    suffix: str | None = None
    best_of: ChoiceCount | None = None

    @field_validator("prompt")
    @classmethod
    def _prompt_values(cls, value: Prompt, info: ValidationInfo) -> Prompt:
        # n is declared (so validated) before prompt; a bad n has its own error already.
        sequences = prompt_count(value) * int(info.data.get("n", 1))
        if sequences > MAX_SEQUENCES:
            raise ValueError(
                f"prompts x n is {sequences}, and at most {MAX_SEQUENCES} sequences fit in one request: "
                "split the prompts across requests"
            )
        for item in [value] if isinstance(value, str) else value:
            if isinstance(item, str):
                well_formed(item)
                continue
            # No vocabulary reaches 2**31 ids; the model's own size is checked once it is known.
            ids = [item] if isinstance(item, int) else item
            bad = next((t for t in ids if not 0 <= t <= MAX_INT32), None)
            if bad is not None:
                raise ValueError(f"token id {bad} is outside any vocabulary (ids are in [0, {MAX_INT32}])")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> CompletionRequest:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        if self.suffix:
            raise ValueError("suffix is not supported")
        if self.best_of is not None and self.best_of != self.n:
            raise ValueError("best_of other than n is not supported")
        return self

    def token_limit(self) -> int:
        return self.max_tokens if self.max_tokens is not None else DEFAULT_COMPLETION_TOKENS


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: Literal["stop", "length", "abort"] | None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage
    system_fingerprint: str | None = None
