"""/v1/chat/completions request and response schemas."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator, model_validator

from webapp.api.schemas.common import JSONSchema, SamplingFields, Text, Usage, well_formed
from webapp.serving.sampling import TokenCount, TopLogprobs

# Every message is rendered through the chat template and every tool's schema into the prompt (and, for
# tool_choice "required", into one grammar): bounded counts keep that work proportional to real use.
MAX_MESSAGES = 2048
MAX_TOOLS = 128


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ImagePart(BaseModel):
    """Accepted by the schema so the error is a clear 400 from the service, not a shape mismatch."""

    type: Literal["image_url", "input_audio", "file"]
    model_config = ConfigDict(extra="allow")


class FunctionCall(BaseModel):
    name: Text
    arguments: Text


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart | ImagePart] | None = None
    name: Text | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: Text | None = None

    @field_validator("content")
    @classmethod
    def _content_text(cls, content: str | list[TextPart | ImagePart] | None) -> Any:
        # Checked here rather than by a Text type inside the union, whose errors would name each member.
        parts = content if isinstance(content, list) else [content]
        for part in parts:
            if isinstance(part, str | TextPart):
                well_formed(part if isinstance(part, str) else part.text)
        return content

    @model_validator(mode="after")
    def _content_needed(self) -> ChatMessage:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        return self


class FunctionDef(BaseModel):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")
    description: Text | None = None
    parameters: JSONSchema | None = None
    strict: StrictBool | None = None


class Tool(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDef


class NamedFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"] = "function"
    function: NamedFunction


class JSONSchemaFormat(BaseModel):
    name: str = "response"
    description: str | None = None
    # "schema" shadows a BaseModel attribute, hence the alias.
    json_schema: JSONSchema | None = Field(default=None, alias="schema")
    strict: StrictBool | None = None
    model_config = ConfigDict(populate_by_name=True)


class ResponseFormat(BaseModel):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and (self.json_schema is None or self.json_schema.json_schema is None):
            raise ValueError("response_format json_schema needs json_schema.schema")
        return self


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_completion_tokens: TokenCount | None = None
    logprobs: StrictBool = False
    top_logprobs: TopLogprobs | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: StrictBool | None = None
    add_generation_prompt: StrictBool = True

    @model_validator(mode="after")
    def _consistent(self) -> ChatCompletionRequest:
        if self.top_logprobs is not None and self.top_logprobs > 0 and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream: true")
        if self.tool_choice not in (None, "none", "auto") and not self.tools:
            raise ValueError("tool_choice needs tools")
        if isinstance(self.tool_choice, NamedToolChoice) and self.tools:
            names = {t.function.name for t in self.tools}
            if self.tool_choice.function.name not in names:
                raise ValueError(f"tool_choice names an unknown function {self.tool_choice.function.name!r}")
        constrained_format = self.response_format is not None and self.response_format.type != "text"
        if self.tools and constrained_format and self.tool_choice not in (None, "none"):
            raise ValueError("response_format and tools cannot both constrain the output")
        return self

    def token_limit(self) -> int | None:
        """max_completion_tokens wins over the older max_tokens."""
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCall] | None = None


class ChatChoice(BaseModel):
    index: int
    message: ResponseMessage
    logprobs: ChoiceLogprobs | None
    finish_reason: Literal["stop", "length", "tool_calls", "abort"] | None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage
    system_fingerprint: str | None = None
