"""SamplingParams: the OpenAI parameter set plus top_k, min_p and repetition_penalty, validated.

Torch-free (part of the web layer's contract, inference.api): tensors built from these values, such as
logit_bias's, belong to the engine side (inference/core/sequence.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# (token ids so far: prompt + generated, logits row: a torch.Tensor [vocab]) -> logits row. Used for
# grammar masks. The tensors are typed Any so that the contract names torch nowhere, not even for mypy.
LogitsProcessor = Callable[[list[int], Any], Any]

MAX_LOGPROBS = 20
MAX_N = 128
# Every number must fit the engine's tensors (int64 ids and counts, float32 logits), so each parameter
# has a finite range; past it a request is refused here instead of failing inside a batched step.
MAX_INT32 = 2**31 - 1
MAX_TEMPERATURE = 100.0
MIN_REPETITION_PENALTY = 0.01
MAX_REPETITION_PENALTY = 100.0
MAX_LOGIT_BIAS = 300  # OpenAI's limit on logit_bias entries
MAX_LOGIT_BIAS_VALUE = 100.0  # each entry's bias lies in [-100, 100], as OpenAI's
MAX_PENALTY = 2.0  # presence and frequency penalties lie in [-2, 2], as OpenAI's
MAX_STOP_TOKEN_IDS = 1024
MAX_STOP_STRINGS = 16
MAX_STOP_STRING_CHARS = 1024
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts
_GREEDY_EPS = 1e-5


@dataclass(slots=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1 or 0: off
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    max_tokens: int | None = 16  # None: up to max_model_len
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # None: off; 0: chosen token only; k: chosen plus top k
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    logits_processors: list[LogitsProcessor] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):  # OpenAI accepts a bare string
            self.stop = [self.stop]
        self.stop = list(self.stop)
        self.stop_token_ids = list(self.stop_token_ids)
        self._check_ranges()
        self._check_lengths()

    def _check_ranges(self) -> None:
        _check_int("n", self.n, 1, MAX_N)
        _check_float("temperature", self.temperature, 0.0, MAX_TEMPERATURE)
        _check_float("top_p", self.top_p, 0.0, 1.0)
        if self.top_p <= 0.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        _check_int("top_k", self.top_k, -1, MAX_INT32)  # -1 and 0 mean off
        _check_float("min_p", self.min_p, 0.0, 1.0)
        _check_float("presence_penalty", self.presence_penalty, -MAX_PENALTY, MAX_PENALTY)
        _check_float("frequency_penalty", self.frequency_penalty, -MAX_PENALTY, MAX_PENALTY)
        _check_float(
            "repetition_penalty", self.repetition_penalty, MIN_REPETITION_PENALTY, MAX_REPETITION_PENALTY
        )
        bias = self.logit_bias or {}
        if len(bias) > MAX_LOGIT_BIAS:
            raise ValueError(f"logit_bias has {len(bias)} entries; at most {MAX_LOGIT_BIAS} are allowed")
        for token_id, value in bias.items():
            _check_int("logit_bias token id", token_id, 0, MAX_INT32)
            _check_float(f"logit_bias[{token_id}]", value, -MAX_LOGIT_BIAS_VALUE, MAX_LOGIT_BIAS_VALUE)
        if self.seed is not None:
            _check_int("seed", self.seed, *SEED_RANGE)
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None:
                _check_int(name, value, 0, MAX_LOGPROBS)

    def _check_lengths(self) -> None:
        if self.max_tokens is not None:
            _check_int("max_tokens", self.max_tokens, 1, MAX_INT32)
        _check_int("min_tokens", self.min_tokens, 0, MAX_INT32)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(self.stop)}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError("stop strings must be non-empty strings")
        if any(len(s) > MAX_STOP_STRING_CHARS for s in self.stop):
            raise ValueError(f"each stop string may have at most {MAX_STOP_STRING_CHARS} characters")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(f"at most {MAX_STOP_TOKEN_IDS} stop_token_ids are allowed")
        for token_id in self.stop_token_ids:
            _check_int("stop_token_ids entry", token_id, 0, MAX_INT32)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS

    @property
    def has_penalties(self) -> bool:
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    @property
    def effective_top_k(self) -> int:
        """0 means off, whichever of the two spellings the caller used."""
        return max(self.top_k, 0)


def _check_int(name: str, value: object, low: int, high: int) -> None:
    # bool is an int subclass, and a float such as 1e30 is not an integer at all.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


def _check_float(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or not low <= value <= high:
        raise ValueError(f"{name} must be a finite number in [{low}, {high}], got {value}")
