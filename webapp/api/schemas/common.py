"""Request fields shared by chat and completions, with OpenAI's ranges (defined in webapp.serving.sampling).

Every number has a finite range the engine's tensors can hold (int64 counts and ids, float32 logits), so
no value that passes here can fail inside a batched step: integers that size tensors or index the
vocabulary stop at 2**31 - 1, seeds at int64, and floats must be finite (Python's json reads NaN and
Infinity, and pydantic would let them through).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, field_validator

from inference.api import MAX_INT32, MAX_LOGIT_BIAS, MAX_STOP_STRINGS
from webapp.serving.sampling import (
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

# A JSON schema (response_format's, or a tool's parameters) is compiled into a grammar on every request:
# bounding its size, nesting and regexes bounds the compile's time and memory (webapp.api.services.grammar).
MAX_JSON_SCHEMA_BYTES = 64 * 1024  # serialized compactly as UTF-8
MAX_JSON_SCHEMA_DEPTH = 32  # nested JSON objects and arrays; the schema itself is level 1
# llguidance intersects the regexes that apply to one value (allOf, patternProperties), and checking an
# intersection for emptiness grows ~4x per regex, with no fuel limit on it: 10 take ~0.02 s, 13 ~1.4 s and
# 14 ~5 s and 650 MB, 16 need GBs (llguidance 1.9). The grammar sandbox's time and memory limits are what
# stops those; this cap only keeps a schema's regexes to a number real schemas do not reach.
MAX_JSON_SCHEMA_PATTERNS = 64  # "pattern" values plus "patternProperties" keys


def well_formed(text: str) -> str:
    """Refuse a lone surrogate (JSON "\\ud800"): it is not Unicode text; tokenizers and UTF-8 choke on it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"text has a lone surrogate at position {exc.start}; send valid Unicode") from None
    return text


Text = Annotated[str, AfterValidator(well_formed)]


def _depth_and_patterns(schema: dict[str, Any]) -> tuple[int, int]:
    """The nesting depth and regex count of `schema`, walked iteratively and stopping past the limits."""
    depth, patterns = 0, 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack and depth <= MAX_JSON_SCHEMA_DEPTH:
        node, level = stack.pop()
        if isinstance(node, dict):
            depth = max(depth, level)
            if isinstance(node.get("pattern"), str):
                patterns += 1
            if isinstance(node.get("patternProperties"), dict):
                patterns += len(node["patternProperties"])
            stack.extend((value, level + 1) for value in node.values())
        elif isinstance(node, list):
            depth = max(depth, level)
            stack.extend((value, level + 1) for value in node)
    return depth, patterns


def bounded_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Refuse a JSON schema too big, too deep or with too many regexes to compile into a grammar quickly."""
    depth, patterns = _depth_and_patterns(schema)
    if depth > MAX_JSON_SCHEMA_DEPTH:
        raise ValueError(f"the JSON schema is nested more than {MAX_JSON_SCHEMA_DEPTH} levels deep")
    size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass"))
    if size > MAX_JSON_SCHEMA_BYTES:
        raise ValueError(f"the JSON schema is {size} bytes; at most {MAX_JSON_SCHEMA_BYTES} are allowed")
    if patterns > MAX_JSON_SCHEMA_PATTERNS:
        raise ValueError(
            f"the JSON schema has {patterns} regular expressions (pattern, patternProperties); "
            f"at most {MAX_JSON_SCHEMA_PATTERNS} are allowed"
        )
    return schema


JSONSchema = Annotated[dict[str, Any], AfterValidator(bounded_schema)]


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
