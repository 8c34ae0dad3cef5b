"""Request fields shared by chat and completions, with OpenAI's ranges.

Every number has a finite range the engine's tensors can hold (int64 counts and ids, float32 logits), so
no value that passes here can fail inside a batched step: integers that size tensors or index the
vocabulary stop at 2**31 - 1, seeds at int64, and floats must be finite (Python's json reads NaN and
Infinity, and pydantic would let them through).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
MAX_N = 64
MAX_TOP_LOGPROBS = 20
MAX_STOP_SEQUENCES = 16
MAX_LOGIT_BIAS = 300  # OpenAI's limit on logit_bias entries
MIN_REPETITION_PENALTY = 0.01  # the engine's floor: logits are divided by it


def well_formed(text: str) -> str:
    """Refuse a lone surrogate (JSON "\\ud800"): it is not Unicode text; tokenizers and UTF-8 choke on it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text has a lone surrogate at position {exc.start}; send valid Unicode") from None
    return text


Text = Annotated[str, AfterValidator(well_formed)]
# Token ids index int32-sized vocabularies; the model's own vocabulary is checked later.
TokenId = Annotated[int, Field(ge=0, le=INT32_MAX)]
TokenCount = Annotated[int, Field(ge=1, le=INT32_MAX)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
Bias = Annotated[float, Field(ge=-100.0, le=100.0)]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: bool = False


class SamplingFields(BaseModel):
    """Fields both generation endpoints accept; unknown fields are ignored, as OpenAI's SDKs send extras."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    # Not checked for well-formed text: an unknown name is a 404, and the request log escapes it.
    model: str | None = None
    max_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    presence_penalty: Penalty = 0.0
    frequency_penalty: Penalty = 0.0
    logit_bias: dict[str, Bias] | None = Field(default=None, max_length=MAX_LOGIT_BIAS)
    seed: int | None = Field(default=None, ge=INT64_MIN, le=INT64_MAX)
    user: str | None = None
    # Extras beyond OpenAI, as vLLM accepts them.
    top_k: int | None = Field(default=None, ge=-1, le=INT32_MAX)  # -1 and 0: off
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, ge=MIN_REPETITION_PENALTY, le=2.0)
    min_tokens: int = Field(default=0, ge=0, le=INT32_MAX)
    ignore_eos: bool = False
    skip_special_tokens: bool = True

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        for stop in [value] if isinstance(value, str) else value or []:
            well_formed(stop)
        if isinstance(value, list):
            if len(value) > MAX_STOP_SEQUENCES:
                raise ValueError(f"at most {MAX_STOP_SEQUENCES} stop sequences")
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
            if not (key.isascii() and key.isdecimal() and len(key) <= 10 and int(key) <= INT32_MAX):
                raise ValueError(f"logit_bias keys must be token ids in [0, {INT32_MAX}], got {key!r}")
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
