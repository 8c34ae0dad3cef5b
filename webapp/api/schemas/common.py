"""Request fields shared by chat and completions, with OpenAI's ranges (defined in webapp.core.sampling).

Every number has a finite range the engine's tensors can hold (int64 counts and ids, float32 logits), so
no value that passes here can fail inside a batched step: integers that size tensors or index the
vocabulary stop at 2**31 - 1, seeds at int64, and floats must be finite (Python's json reads NaN and
Infinity, and pydantic would let them through).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, field_validator

from inference.api import MAX_INT32, MAX_LOGIT_BIAS, MAX_STOP_STRINGS
from webapp.core.sampling import (
    Bias,
    ChoiceCount,
    MinP,
    MinTokens,
    Penalty,
    RepetitionPenalty,
    Seed,
    Temperature,
    TokenCount,
    TopK,
    TopP,
)


def well_formed(text: str) -> str:
    """Refuse a lone surrogate (JSON "\\ud800"): it is not Unicode text; tokenizers and UTF-8 choke on it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text has a lone surrogate at position {exc.start}; send valid Unicode") from None
    return text


Text = Annotated[str, AfterValidator(well_formed)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: StrictBool = False


class SamplingFields(BaseModel):
    """Fields both generation endpoints accept; unknown fields are ignored, as OpenAI's SDKs send extras."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    # Not checked for well-formed text: an unknown name is a 404, and the request log escapes it.
    model: str | None = None
    max_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: ChoiceCount = 1
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: dict[str, Bias] | None = Field(default=None, max_length=MAX_LOGIT_BIAS)
    seed: Seed | None = None
    user: str | None = None
    # Extras beyond OpenAI, as vLLM accepts them.
    top_k: TopK | None = None  # -1 and 0: off
    min_p: MinP | None = None
    repetition_penalty: RepetitionPenalty | None = None
    min_tokens: MinTokens = 0
    ignore_eos: StrictBool = False
    skip_special_tokens: StrictBool = True

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        for stop in [value] if isinstance(value, str) else value or []:
            well_formed(stop)
        if isinstance(value, list):
            if len(value) > MAX_STOP_STRINGS:
                raise ValueError(f"at most {MAX_STOP_STRINGS} stop sequences")
            if any(s == "" for s in value):
                raise ValueError("stop sequences must not be empty")
        elif value == "":
            raise ValueError("stop sequences must not be empty")
        return value

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            # isdecimal() alone would take "٣" or a 5000-digit number: ASCII digits, then the range.
            if not (key.isascii() and key.isdecimal() and len(key) <= 10 and int(key) <= MAX_INT32):
                raise ValueError(f"logit_bias keys must be token ids in [0, {MAX_INT32}], got {key!r}")
        return value

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int | str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
