"""The `speculative` model setting: n-gram (prompt-lookup) speculative decoding, off unless set.

mooncake.yaml writes it as a mapping, as vLLM's speculative_config does:

    speculative: {method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 4, prompt_lookup_min: 2}

Torch-free, so EngineConfig (read before Django is set up) can hold it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SPECULATIVE_METHODS = ("ngram",)
SPECULATIVE_KEYS = ("method", "num_speculative_tokens", "prompt_lookup_max", "prompt_lookup_min")
# Past this a rejected draft wastes more of the verification pass than a longer accepted run could win.
MAX_SPECULATIVE_TOKENS = 16
# The longest n-gram looked up when prompt_lookup_max is left out; the shortest defaults to 2 (at most the
# longest): single-token matches draft often and are rarely accepted.
DEFAULT_PROMPT_LOOKUP_MAX = 4
DEFAULT_PROMPT_LOOKUP_MIN = 2


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    method: str = "ngram"
    num_speculative_tokens: int = 4
    prompt_lookup_max: int = DEFAULT_PROMPT_LOOKUP_MAX
    prompt_lookup_min: int = DEFAULT_PROMPT_LOOKUP_MIN

    def __post_init__(self) -> None:
        if self.method not in SPECULATIVE_METHODS:
            raise ValueError(
                f"speculative.method must be one of {SPECULATIVE_METHODS}, got {self.method!r} "
                "(draft models and EAGLE are not supported)"
            )
        _check_int("num_speculative_tokens", self.num_speculative_tokens, 1, MAX_SPECULATIVE_TOKENS)
        _check_int("prompt_lookup_max", self.prompt_lookup_max, 1, None)
        _check_int("prompt_lookup_min", self.prompt_lookup_min, 1, None)
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError(
                f"speculative.prompt_lookup_min ({self.prompt_lookup_min}) must be <= prompt_lookup_max "
                f"({self.prompt_lookup_max})"
            )

    def __str__(self) -> str:
        return (
            f"{self.method}: {self.num_speculative_tokens} tokens from "
            f"{self.prompt_lookup_min}..{self.prompt_lookup_max}-gram matches"
        )

    @classmethod
    def from_value(cls, value: Any) -> SpeculativeConfig | None:
        """From a yaml mapping (None or an empty mapping: off); raises ValueError naming the bad key."""
        if value is None or isinstance(value, SpeculativeConfig):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                "speculative must be a mapping such as {method: ngram, num_speculative_tokens: 4, "
                f"prompt_lookup_max: 4}}, got {value!r}"
            )
        if not value:
            return None
        unknown = sorted(str(k) for k in value if k not in SPECULATIVE_KEYS)
        if unknown:
            raise ValueError(
                f"unknown speculative setting(s): {', '.join(unknown)} (known: {', '.join(SPECULATIVE_KEYS)})"
            )
        if "method" not in value:
            raise ValueError(f"speculative.method is required (one of {SPECULATIVE_METHODS})")
        kwargs: dict[str, Any] = {"method": str(value["method"]).strip().lower()}
        for key in SPECULATIVE_KEYS[1:]:
            if value.get(key) is not None:
                kwargs[key] = _as_int(key, value[key])
        # As vLLM: one bound given alone sets the other where the default would contradict it.
        if "prompt_lookup_min" not in kwargs:
            kwargs["prompt_lookup_min"] = min(
                DEFAULT_PROMPT_LOOKUP_MIN, kwargs.get("prompt_lookup_max", DEFAULT_PROMPT_LOOKUP_MAX)
            )
        if "prompt_lookup_max" not in kwargs:
            kwargs["prompt_lookup_max"] = max(DEFAULT_PROMPT_LOOKUP_MAX, kwargs["prompt_lookup_min"])
        return cls(**kwargs)


def _as_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"speculative.{key} must be an integer, got {value!r}")
    try:
        number = float(value) if isinstance(value, str) else value
        if isinstance(number, float):
            if not number.is_integer():
                raise ValueError
            return int(number)
        return int(number)
    except (TypeError, ValueError):
        raise ValueError(f"speculative.{key} must be an integer, got {value!r}") from None


def _check_int(key: str, value: int, low: int, high: int | None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"speculative.{key} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"speculative.{key} must be {bound}, got {value}")
