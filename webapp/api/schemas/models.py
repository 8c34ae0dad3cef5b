"""/v1/models and /tokenize, /detokenize schemas."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from webapp.api.schemas.chat import ChatMessage
from webapp.api.schemas.chat import Tool as ChatTool
from webapp.api.schemas.common import Text
from webapp.serving.sampling import TokenId


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "mooncake"
    # Beyond OpenAI's fields: what the console shows too.
    state: str | None = None
    aliases: list[str] = []
    max_model_len: int | None = None
    # While a hub model downloads (state "downloading"): {"bytes_done": int, "bytes_total": int | None}.
    download: dict[str, int | None] | None = None
    # While it loads (state "loading"): {"step": str, "done": int | None, "total": int | None}, the step
    # as the console shows it (e.g. "converting tensors", 120 of 272).
    load: dict[str, str | int | None] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class TokenizeRequest(BaseModel):
    """Either a prompt, or chat messages rendered with the model's template."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: Text | None = None
    messages: list[ChatMessage] | None = None
    tools: list[ChatTool] | None = None
    add_special_tokens: StrictBool = True
    add_generation_prompt: StrictBool = True

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of prompt or messages")
        return self


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    tokens: list[TokenId] = Field(max_length=1_000_000)


class DetokenizeResponse(BaseModel):
    prompt: str
