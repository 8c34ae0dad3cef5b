"""Sampling parameter ranges, each defined once, for every form, service and schema of the web layer, and
the one place the web layer builds the engine's SamplingParams (`sampling_params`).

The engine's SamplingParams bounds (inference.api) are what its tensors can hold. Chat and the API add
OpenAI's stricter ranges as policy (temperature up to 2, n up to 64, repetition_penalty up to 2), named
here and nowhere else. Pydantic schemas use the Annotated types; Django forms and services use the same
Range through its bounds, `check` and `validator`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from django.core.exceptions import ValidationError
from pydantic import Field

from inference.api import (
    MAX_INT32,
    MAX_LOGIT_BIAS_VALUE,
    MAX_LOGPROBS,
    MAX_PENALTY,
    MIN_REPETITION_PENALTY,
    SEED_RANGE,
    SamplingParams,
)
from webapp.core.errors import InvalidRequest

# ---- policy: OpenAI's ranges, stricter than the engine's (MAX_TEMPERATURE 100, MAX_N 128, penalty 100)
API_MAX_TEMPERATURE = 2.0
API_MAX_N = 64
API_MAX_REPETITION_PENALTY = 2.0
# A chat reply's cap: the chat settings form, its service and chat import share it.
CHAT_MAX_TOKENS = 32_768
# OpenAI's seeds are int64 (the engine would take up to 2**64 - 1).
MAX_SEED = 2**63 - 1


Number = TypeVar("Number", int, float)


@dataclass(frozen=True, slots=True)
class Range(Generic[Number]):
    """A closed range, or one open at the bottom (top_p: above 0)."""

    low: Number
    high: Number
    low_open: bool = False

    def contains(self, value: float) -> bool:
        if isinstance(value, float) and not math.isfinite(value):
            return False
        return (self.low < value if self.low_open else self.low <= value) and value <= self.high

    def describe(self) -> str:
        return f"{'above' if self.low_open else 'at least'} {self.low} and at most {self.high}"

    def check(self, name: str, value: float) -> None:
        """ValueError naming the parameter when `value` is outside (services raise it as a 400)."""
        if not self.contains(value):
            raise ValueError(f"{name} must be {self.describe()}, got {value}.")

    def validator(self) -> Callable[[Any], None]:
        """A Django form validator for this range (forms' min/max cannot express an open bound)."""

        def validate(value: Any) -> None:
            if value is not None and not self.contains(value):
                raise ValidationError(f"Must be {self.describe()}.")

        return validate

    def field(self) -> Any:
        """Pydantic constraints for this range."""
        if self.low_open:
            return Field(gt=self.low, le=self.high)
        return Field(ge=self.low, le=self.high)


TEMPERATURE = Range(0.0, API_MAX_TEMPERATURE)
TOP_P = Range(0.0, 1.0, low_open=True)
TOP_K = Range(-1, MAX_INT32)  # -1 and 0: off
MIN_P = Range(0.0, 1.0)
PENALTY = Range(-MAX_PENALTY, MAX_PENALTY)  # presence and frequency
REPETITION_PENALTY = Range(MIN_REPETITION_PENALTY, API_MAX_REPETITION_PENALTY)
LOGIT_BIAS = Range(-MAX_LOGIT_BIAS_VALUE, MAX_LOGIT_BIAS_VALUE)
TOKEN_ID = Range(0, MAX_INT32)
TOKEN_COUNT = Range(1, MAX_INT32)  # max_tokens and friends: positive and int32-sized
MIN_TOKENS = Range(0, MAX_INT32)
CHAT_REPLY_TOKENS = Range(1, CHAT_MAX_TOKENS)
N = Range(1, API_MAX_N)
TOP_LOGPROBS = Range(0, MAX_LOGPROBS)
SEED = Range(SEED_RANGE[0], MAX_SEED)

Temperature = Annotated[float, TEMPERATURE.field()]
TopP = Annotated[float, TOP_P.field()]
TopK = Annotated[int, TOP_K.field()]
MinP = Annotated[float, MIN_P.field()]
Penalty = Annotated[float, PENALTY.field()]
RepetitionPenalty = Annotated[float, REPETITION_PENALTY.field()]
Bias = Annotated[float, LOGIT_BIAS.field()]
TokenId = Annotated[int, TOKEN_ID.field()]
TokenCount = Annotated[int, TOKEN_COUNT.field()]
MinTokens = Annotated[int, MIN_TOKENS.field()]
ChatReplyTokens = Annotated[int, CHAT_REPLY_TOKENS.field()]
ChoiceCount = Annotated[int, N.field()]
TopLogprobs = Annotated[int, TOP_LOGPROBS.field()]
Seed = Annotated[int, SEED.field()]


def sampling_params(*, explain: str = "", code: str | None = None, **values: Any) -> SamplingParams:
    """The engine's SamplingParams for an API request, a chat reply or a title. The engine's own checks
    (its ValueErrors and TypeErrors) become a 400 whose message starts with `explain`."""
    try:
        return SamplingParams(**values)
    except (ValueError, TypeError) as exc:
        raise InvalidRequest(f"{explain}{exc}", code=code) from exc
