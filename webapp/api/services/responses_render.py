"""Responses objects from chat results: the Response object, its output items and usage.

A chat completion (or the chunks of one) is what the pipeline produces; this module says how it reads as
OpenAI's Response: content becomes a message item, each tool call a function_call item, finish reason
"length" an incomplete response (reason max_output_tokens).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from webapp.api.schemas.responses import ResponsesRequest
from webapp.api.services.responses_request import message_item, new_id

TERMINAL = frozenset({"completed", "incomplete", "failed", "cancelled"})


@dataclass(slots=True)
class ResponseSpec:
    """What a Response object echoes of its request, fixed when the request is accepted."""

    id: str
    created_at: int
    model: str
    request: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, body: ResponsesRequest) -> ResponseSpec:
        fmt = body.text.format.model_dump(by_alias=True, exclude_none=True) if body.text else {"type": "text"}
        tool_choice: Any = body.tool_choice if body.tool_choice is not None else "auto"
        request = {
            "instructions": body.instructions,
            "max_output_tokens": body.max_output_tokens,
            "metadata": body.metadata or {},
            "parallel_tool_calls": body.parallel_tool_calls if body.parallel_tool_calls is not None else True,
            "previous_response_id": body.previous_response_id,
            "reasoning": None,
            "store": body.store,
            "background": body.background,
            "temperature": body.temperature if body.temperature is not None else 1.0,
            "text": {"format": fmt},
            "tool_choice": tool_choice,
            "tools": [t.model_dump(exclude_none=True) for t in body.tools or []],
            "top_p": body.top_p if body.top_p is not None else 1.0,
            "truncation": "disabled",
            "user": body.user,
        }
        return cls(id=new_id("resp"), created_at=int(time.time()), model=body.model or "", request=request)


def response_object(
    spec: ResponseSpec,
    *,
    status: str,
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    incomplete_reason: str | None = None,
) -> dict[str, Any]:
    return {
        "id": spec.id,
        "object": "response",
        "created_at": spec.created_at,
        "status": status,
        "completed_at": int(time.time()) if status == "completed" else None,
        "error": error,
        "incomplete_details": {"reason": incomplete_reason} if status == "incomplete" else None,
        "model": spec.model,
        "output": output or [],
        "usage": usage,
        **spec.request,
    }


def usage_object(chat_usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Chat's usage as Responses names it, with the detail objects OpenAI sends (nothing cached here)."""
    if chat_usage is None:
        return None
    return {
        "input_tokens": chat_usage["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": chat_usage["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": chat_usage["total_tokens"],
    }


def error_object(code: str | None, message: str) -> dict[str, Any]:
    return {"code": code or "server_error", "message": message}


def function_call_item(call: dict[str, Any], *, status: str, item_id: str | None = None) -> dict[str, Any]:
    """A chat tool call ({id, function: {name, arguments}}) as a function_call output item."""
    return {
        "id": item_id or new_id("fc"),
        "type": "function_call",
        "status": status,
        "call_id": call["id"],
        "name": call["function"]["name"],
        "arguments": call["function"].get("arguments", ""),
    }


def status_of(finish_reason: str | None) -> tuple[str, str | None]:
    """(response status, incomplete reason) for a chat finish reason."""
    if finish_reason in ("stop", "tool_calls"):
        return "completed", None
    if finish_reason == "length":
        return "incomplete", "max_output_tokens"
    return "incomplete", None


def output_of(completion: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str | None]:
    """(output items, status, incomplete reason) of a chat completion's first choice."""
    choice = completion["choices"][0]
    status, reason = status_of(choice["finish_reason"])
    item_status = "completed" if status == "completed" else "incomplete"
    message = choice["message"]
    calls = message.get("tool_calls") or []
    items: list[dict[str, Any]] = []
    if message.get("content") or not calls:
        items.append(message_item("assistant", message.get("content") or "", status=item_status))
    items.extend(function_call_item(call, status=item_status) for call in calls)
    return items, status, reason


def completed_object(spec: ResponseSpec, completion: dict[str, Any]) -> dict[str, Any]:
    """The Response object for a finished (non-streamed) chat completion."""
    spec.model = completion["model"]
    output, status, reason = output_of(completion)
    return response_object(
        spec, status=status, output=output, usage=usage_object(completion["usage"]), incomplete_reason=reason
    )
