"""/v1/embeddings request and response schemas (OpenAI's)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from inference.api import MAX_INT32
from webapp.api.schemas.common import well_formed

# OpenAI's own bound on inputs per request.
MAX_INPUTS = 2048

# A string, a list of strings, a list of token ids, or a list of token-id lists.
EmbeddingInput = str | list[str] | list[int] | list[list[int]]


def input_rows(value: EmbeddingInput) -> list[str | list[int]]:
    """The inputs one by one: each a text or one row of token ids."""
    if isinstance(value, str):
        return [value]
    if value and all(isinstance(item, int) for item in value):
        return [[int(item) for item in value if isinstance(item, int)]]
    return [item for item in value if not isinstance(item, int)]


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")  # SDKs send extras (user, ...)

    # Not checked for well-formed text: an unknown name is a 404, and the request log escapes it.
    model: str | None = None
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    user: str | None = None

    @field_validator("input")
    @classmethod
    def _inputs(cls, value: EmbeddingInput) -> EmbeddingInput:
        rows = input_rows(value)
        if not rows:
            raise ValueError("input must not be empty")
        if len(rows) > MAX_INPUTS:
            raise ValueError(f"input has {len(rows)} items; at most {MAX_INPUTS} fit in one request")
        for row in rows:
            if isinstance(row, str):
                if not row:
                    raise ValueError("input must not contain empty strings")
                well_formed(row)
                continue
            if not row:
                raise ValueError("input must not contain empty token lists")
            bad = next((t for t in row if not 0 <= t <= MAX_INT32), None)
            if bad is not None:
                raise ValueError(f"token id {bad} is outside any vocabulary (ids are in [0, {MAX_INT32}])")
        return value


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str  # a string when encoding_format is base64


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
