"""Prompts to token ids, and the length/vocabulary checks every 400 about a prompt comes from."""

from __future__ import annotations

import json
from typing import Any

from inference.api import EngineClient
from webapp.api.errors import invalid
from webapp.api.schemas.chat import ChatMessage, TextPart, Tool
from webapp.api.services.engine_access import vocab_size
from webapp.api.services.tools import tools_system_prompt


def message_text(message: ChatMessage) -> str:
    content = message.content
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if not isinstance(part, TextPart):
            raise invalid(
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
    plain = template_messages(messages)
    tool_dicts = [t.model_dump(exclude_none=True) for t in tools] if tools else None
    try:
        if not tool_dicts:
            return list(engine.apply_chat_template(plain, add_generation_prompt=add_generation_prompt))
        with_tools = list(
            engine.apply_chat_template(plain, tools=tool_dicts, add_generation_prompt=add_generation_prompt)
        )
        without = list(engine.apply_chat_template(plain, add_generation_prompt=add_generation_prompt))
        if with_tools != without:
            return with_tools
        # The template ignores tools: describe them in the system message instead.
        return list(
            engine.apply_chat_template(
                _with_system(plain, tools_system_prompt(tool_dicts)),
                add_generation_prompt=add_generation_prompt,
            )
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise invalid(f"the chat template could not render these messages: {exc}", param="messages") from exc
    except Exception as exc:
        # jinja2's TemplateError (e.g. a template's raise_exception about role order) is the client's input.
        if type(exc).__module__.startswith("jinja2"):
            raise invalid(f"the chat template rejected these messages: {exc}", param="messages") from exc
        raise


def _with_system(messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=f"{messages[0]['content']}\n\n{text}")
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def encode_text(engine: EngineClient, text: str) -> list[int]:
    return list(engine.tokenizer.encode(text))


def check_prompt(engine: EngineClient, ids: list[int], *, max_tokens: int | None, param: str) -> int:
    """Validate one prompt's ids; return the max_tokens to use (None: the rest of the context)."""
    if not ids:
        raise invalid("The prompt is empty.", param=param)
    vocab = vocab_size(engine)
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise invalid(f"Token id {bad} is out of vocabulary (size {vocab}).", param=param)
    limit = int(engine.max_model_len)
    if len(ids) >= limit:
        raise invalid(
            f"This model's maximum context length is {limit} tokens; the prompt has {len(ids)}.",
            param=param,
            code="context_length_exceeded",
        )
    if max_tokens is None:
        return limit - len(ids)
    if len(ids) + max_tokens > limit:
        raise invalid(
            f"This model's maximum context length is {limit} tokens; the prompt ({len(ids)}) plus "
            f"max_tokens ({max_tokens}) is {len(ids) + max_tokens}.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return max_tokens
