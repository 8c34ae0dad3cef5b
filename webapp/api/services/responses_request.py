"""A Responses request as the chat job it runs: refusals, input items, and the chat request they become.

/v1/responses is a third presentation of the chat pipeline: its input items (and a stored conversation's)
turn into chat messages, its flat function tools and text.format into chat's tools and response_format,
so templating, tool-call parsing, grammars and limits are chat's own.
"""

from __future__ import annotations

import secrets
from typing import Any

from pydantic import ValidationError

from webapp.api.schemas.chat import ChatCompletionRequest
from webapp.api.schemas.responses import (
    Content,
    FunctionCallItem,
    FunctionCallOutputItem,
    MessageItem,
    OtherContent,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
)
from webapp.core.errors import InvalidRequest

# Chat's field names as a Responses client knows them, for the `param` of a 400.
_PARAMS = {
    "messages": "input",
    "max_completion_tokens": "max_output_tokens",
    "response_format": "text.format",
}


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


def refuse_unsupported(body: ResponsesRequest) -> None:
    """400, naming the field, for what our models cannot do; silently ignoring it would mislead."""
    for tool in body.tools or []:
        if tool.type != "function":
            raise InvalidRequest(
                f"Tools of type {tool.type!r} are not supported: this server runs function tools only.",
                param="tools",
            )
        if not tool.name:
            raise InvalidRequest("A function tool needs a name.", param="tools")
    if body.reasoning and any(v not in (None, "none") for v in body.reasoning.values()):
        raise InvalidRequest(
            "reasoning options are not supported by this server's models.", param="reasoning"
        )
    if body.include:
        raise InvalidRequest(f"include values {body.include!r} are not supported.", param="include")
    if body.conversation is not None:
        raise InvalidRequest(
            "Conversations are not supported: use previous_response_id.", param="conversation"
        )
    if body.prompt is not None:
        raise InvalidRequest("Prompt templates are not supported: send input.", param="prompt")
    if body.truncation == "auto":
        raise InvalidRequest('truncation "auto" is not supported: use "disabled".', param="truncation")
    if body.top_logprobs:
        raise InvalidRequest("top_logprobs is not supported on /v1/responses.", param="top_logprobs")
    if body.background and not body.store:
        raise InvalidRequest("background responses need store: true.", param="background")
    if body.background and body.stream:
        raise InvalidRequest("background responses cannot be streamed here.", param="stream")
    if body.input is None and body.previous_response_id is None:
        raise InvalidRequest("input is required.", param="input")


def _text(content: str | list[Content], *, param: str) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, OtherContent):
            raise InvalidRequest(
                f"Content of type {part.type!r} is not supported by this model.", param=param
            )
        parts.append(part.text)
    return "".join(parts)


def message_item(
    role: str, text: str, *, item_id: str | None = None, status: str = "completed"
) -> dict[str, Any]:
    """A message item as Responses renders it: assistant text is output_text, the rest input_text."""
    if role == "assistant":
        part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": []}
    else:
        part = {"type": "input_text", "text": text}
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "role": role,
        "status": status,
        "content": [part],
    }


def input_items(body: ResponsesRequest) -> list[dict[str, Any]]:
    """This request's input as stored items with ids (what input_items lists and later turns replay)."""
    if body.input is None:
        return []
    if isinstance(body.input, str):
        return [message_item("user", body.input)]
    items: list[dict[str, Any]] = []
    for item in body.input:
        if isinstance(item, MessageItem):
            items.append(message_item(item.role, _text(item.content, param="input"), item_id=item.id))
        elif isinstance(item, FunctionCallItem):
            items.append(
                {
                    "id": item.id or new_id("fc"),
                    "type": "function_call",
                    "call_id": item.call_id,
                    "name": item.name,
                    "arguments": item.arguments,
                    "status": "completed",
                }
            )
        elif isinstance(item, FunctionCallOutputItem):
            items.append(
                {
                    "id": item.id or new_id("fco"),
                    "type": "function_call_output",
                    "call_id": item.call_id,
                    "output": _text(item.output, param="input"),
                    "status": "completed",
                }
            )
    return items


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages for stored items; a turn's function calls join its assistant message."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            text = "".join(str(p.get("text", "")) for p in item.get("content", []))
            messages.append({"role": item["role"], "content": text})
        elif kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": item["output"], "tool_call_id": item["call_id"]})
    return messages


def _tool_choice(body: ResponsesRequest) -> Any:
    choice = body.tool_choice
    names = {t.name for t in body.tools or []}
    if choice is None or choice in ("none", "auto"):
        return choice
    if not names:
        raise InvalidRequest("tool_choice needs tools.", param="tool_choice")
    if isinstance(choice, str):
        return choice
    if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
        raise InvalidRequest(
            f"tool_choice of type {choice.get('type')!r} is not supported: use auto, none, required "
            'or {"type": "function", "name": ...}.',
            param="tool_choice",
        )
    if choice["name"] not in names:
        raise InvalidRequest(
            f"tool_choice names an unknown function {choice['name']!r}.", param="tool_choice"
        )
    return {"type": "function", "function": {"name": choice["name"]}}


def _response_format(body: ResponsesRequest) -> dict[str, Any] | None:
    fmt = body.text.format if body.text is not None else None
    if isinstance(fmt, TextFormatJsonObject):
        return {"type": "json_object"}
    if isinstance(fmt, TextFormatJsonSchema):
        schema = {
            "name": fmt.name,
            "description": fmt.description,
            "schema": fmt.json_schema,
            "strict": fmt.strict,
        }
        return {"type": "json_schema", "json_schema": schema}
    return None


def _param(loc: tuple[int | str, ...]) -> str | None:
    parts = [str(p) for p in loc]
    if parts and parts[0] == "tools":
        parts = [p for p in parts if p != "function"]  # chat nests a tool's fields; Responses does not
    if parts:
        parts[0] = _PARAMS.get(parts[0], parts[0])
    return ".".join(parts) or None


def chat_request(
    body: ResponsesRequest, history: list[dict[str, Any]], items: list[dict[str, Any]], *, stream: bool
) -> ChatCompletionRequest:
    """The chat request this Responses request runs as: instructions, then the stored turns, then input."""
    tool_choice = _tool_choice(body)
    response_format = _response_format(body)
    if response_format is not None and body.tools and tool_choice not in (None, "none"):
        raise InvalidRequest("text.format and tools cannot both constrain the output.", param="text.format")
    messages = chat_messages(history + items)
    if body.instructions:
        messages.insert(0, {"role": "system", "content": body.instructions})
    tools = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
                "strict": t.strict,
            },
        }
        for t in body.tools or []
    ]
    fields: dict[str, Any] = {
        "model": body.model,
        "messages": messages,
        "max_completion_tokens": body.max_output_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "seed": body.seed,
        "stop": body.stop,
        "stream": stream,
        # The usage chunk at the end of a chat stream is what response.completed reports.
        "stream_options": {"include_usage": True} if stream else None,
        "tools": tools or None,
        "tool_choice": tool_choice,
        "parallel_tool_calls": body.parallel_tool_calls,
        "response_format": response_format,
        "user": body.user,
    }
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in fields.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise InvalidRequest(message, param=_param(tuple(first.get("loc", ())))) from None
