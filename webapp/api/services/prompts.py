"""API chat messages (pydantic) as the plain dicts chat templates take; rendering lives in core.prompts."""

from __future__ import annotations

import json
from typing import Any

from inference.api import EngineClient
from webapp.api.schemas.chat import ChatMessage, TextPart, Tool
from webapp.core.errors import InvalidRequest
from webapp.serving import prompts


def message_text(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if not isinstance(part, TextPart):
            raise InvalidRequest(
                f"content parts of type {part.type!r} are not supported by this model", param="messages"
            )
        parts.append(part.text)
    return "".join(parts)


def _tool_call_text(message: ChatMessage) -> str:
    """Hermes-style tool-call markup, the same format tools.py parses back out of generations."""
    calls = []
    for call in message.tool_calls or []:
        try:
            arguments: Any = json.loads(call.function.arguments)
        except json.JSONDecodeError:
            arguments = call.function.arguments
        calls.append(
            f"<tool_call>\n{json.dumps({'name': call.function.name, 'arguments': arguments})}\n</tool_call>"
        )
    return "\n".join(calls)


def template_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Plain dicts for the chat template; templates index content as a string, so never hand them None."""
    out: list[dict[str, Any]] = []
    for message in messages:
        role = "system" if message.role == "developer" else message.role
        text = message_text(message)
        if message.tool_calls:
            text = "\n".join(t for t in (text, _tool_call_text(message)) if t)
        entry: dict[str, Any] = {"role": role, "content": text}
        if message.name:
            entry["name"] = message.name
        if message.tool_call_id:
            entry["tool_call_id"] = message.tool_call_id
        out.append(entry)
    return out


def render_chat(
    engine: EngineClient,
    messages: list[ChatMessage],
    *,
    tools: list[Tool] | None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of the conversation under the model's chat template (tools included when given)."""
    tool_dicts = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    return prompts.render_chat(
        engine, template_messages(messages), tools=tool_dicts, add_generation_prompt=add_generation_prompt
    )
