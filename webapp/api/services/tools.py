"""Tool calling: the prompt for templates without tool support, output constraints and call parsing."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, Literal

from webapp.api.schemas.chat import ChatCompletionRequest, NamedToolChoice, Tool

ToolMode = Literal["named", "required", "auto"]

_CALL_RE = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True, slots=True)
class ToolPlan:
    mode: ToolMode
    tools: list[Tool]
    # The JSON schema the output is constrained to (None in auto mode: free text, calls parsed out).
    schema: dict[str, Any] | None
    named: str | None = None


def _parameters(tool: Tool) -> dict[str, Any]:
    return tool.function.parameters or {"type": "object", "properties": {}}


def tool_plan(request: ChatCompletionRequest) -> ToolPlan | None:
    """How tools shape this request's output, or None when they do not."""
    if not request.tools or request.tool_choice == "none":
        return None
    choice = request.tool_choice
    if isinstance(choice, NamedToolChoice):
        tool = next(t for t in request.tools if t.function.name == choice.function.name)
        return ToolPlan(mode="named", tools=request.tools, schema=_parameters(tool), named=tool.function.name)
    if choice == "required":
        variants = [
            {
                "type": "object",
                "properties": {"name": {"const": t.function.name}, "arguments": _parameters(t)},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
            for t in request.tools
        ]
        schema = variants[0] if len(variants) == 1 else {"anyOf": variants}
        return ToolPlan(mode="required", tools=request.tools, schema=schema)
    return ToolPlan(mode="auto", tools=request.tools, schema=None)


def new_call_id() -> str:
    return "call_" + secrets.token_hex(12)


def call_dict(name: str, arguments: str, call_id: str | None = None) -> dict[str, Any]:
    return {
        "id": call_id or new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def parse_calls(plan: ToolPlan, text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool_calls) from a finished generation under `plan`."""
    if plan.mode == "named":
        return None, [call_dict(plan.named or "", text)]
    if plan.mode == "required":
        try:
            obj = json.loads(text)
            return None, [call_dict(str(obj["name"]), json.dumps(obj["arguments"]))]
        except (json.JSONDecodeError, KeyError, TypeError):
            # Cut off by max_tokens: nothing valid to return as a call.
            return text, []
    names = {t.function.name for t in plan.tools}
    calls: list[dict[str, Any]] = []
    for match in _CALL_RE.finditer(text):
        try:
            obj = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("name") in names:
            calls.append(call_dict(str(obj["name"]), json.dumps(obj.get("arguments", {}))))
    if not calls:
        return text, []
    rest = _CALL_RE.sub("", text).strip()
    return rest or None, calls
