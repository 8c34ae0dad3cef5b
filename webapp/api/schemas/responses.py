"""/v1/responses request and response schemas (OpenAI's Responses API).

Fields our models cannot honour (built-in tools, reasoning, include, conversation, prompt templates,
truncation "auto") are accepted loosely here and refused by webapp.api.services.responses_request, so that
each refusal is a 400 naming its field rather than a shape mismatch.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    Tag,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from webapp.api.schemas.chat import MAX_MESSAGES, MAX_TOOLS
from webapp.api.schemas.common import JSONSchema, Text
from webapp.serving.sampling import Seed, Temperature, TokenCount, TopP

MAX_METADATA_KEYS = 16


class TextContent(BaseModel):
    """A text part of a message; output_text is what an assistant message sent back carries."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["input_text", "output_text"]
    text: Text


class OtherContent(BaseModel):
    """Parts we cannot feed a text model: accepted here so the service can refuse them by name."""

    model_config = ConfigDict(extra="allow")
    type: Literal["input_image", "input_file", "input_audio", "refusal"]


Content = Annotated[TextContent | OtherContent, Field(discriminator="type")]


class MessageItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["message"] = "message"
    id: str | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: Text | list[Content]


class FunctionCallItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function_call"]
    id: str | None = None
    call_id: Text
    name: Text
    arguments: Text


class FunctionCallOutputItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["function_call_output"]
    id: str | None = None
    call_id: Text
    output: Text | list[Content]


def _item_type(value: Any) -> str:
    # A message may leave out its type (EasyInputMessage): {"role": "user", "content": "hi"}.
    if isinstance(value, dict):
        return str(value.get("type", "message"))
    return str(getattr(value, "type", "message"))


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")],
    Discriminator(_item_type),
]
_ITEMS: TypeAdapter[list[InputItem]] = TypeAdapter(list[InputItem])


class FunctionTool(BaseModel):
    """A tool as Responses sends it, flat: {type, name, description, parameters, strict}. Any other type
    (web_search, file_search, mcp...) passes the schema and is refused by the service."""

    model_config = ConfigDict(extra="allow")
    type: str
    name: str | None = None
    description: Text | None = None
    parameters: JSONSchema | None = None
    strict: StrictBool | None = None


class TextFormatPlain(BaseModel):
    type: Literal["text"]


class TextFormatJsonObject(BaseModel):
    type: Literal["json_object"]


class TextFormatJsonSchema(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    type: Literal["json_schema"]
    name: str = "response"
    description: str | None = None
    # "schema" shadows a BaseModel attribute, hence the alias.
    json_schema: JSONSchema = Field(alias="schema")
    strict: StrictBool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")
    format: Annotated[
        TextFormatPlain | TextFormatJsonObject | TextFormatJsonSchema, Field(discriminator="type")
    ] = TextFormatPlain(type="text")
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(BaseModel):
    """Unknown fields are ignored, as for chat: OpenAI's SDKs send extras."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    model: str | None = None
    input: Text | list[InputItem] | None = Field(default=None, max_length=MAX_MESSAGES)
    instructions: Text | None = None
    max_output_tokens: TokenCount | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    seed: Seed | None = None
    stop: str | list[str] | None = None
    text: TextConfig | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: StrictBool | None = None
    store: StrictBool = True
    previous_response_id: str | None = Field(default=None, max_length=64)
    background: StrictBool = False
    stream: StrictBool = False
    metadata: dict[str, str] | None = Field(default=None, max_length=MAX_METADATA_KEYS)
    user: str | None = None
    # Refused unless empty (see the module docstring).
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    conversation: Any = None
    prompt: Any = None
    truncation: Literal["auto", "disabled"] | None = None
    top_logprobs: int | None = None

    @field_validator("input", mode="wrap")
    @classmethod
    def _input(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # The union's own error names both members ("input.function-after[...]"): name the item instead.
        try:
            return handler(value)
        except ValidationError:
            if not isinstance(value, list):
                raise
            try:
                _ITEMS.validate_python(value)
            except ValidationError as exc:
                first = exc.errors()[0]
                where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
                raise ValueError(f"input{where}: {first['msg']}") from None
            raise


class InputTokensDetails(BaseModel):
    cached_tokens: int
    cache_write_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseObject(BaseModel):
    """The Response object (for the schema; the views render it as JSON themselves)."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]
    model: str
    output: list[dict[str, Any]]
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    usage: ResponseUsage | None = None
    previous_response_id: str | None = None


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool


class InputItemList(BaseModel):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None
    last_id: str | None
    has_more: bool
