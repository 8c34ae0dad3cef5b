"""A chat stream's chunks as the Responses API's typed events, numbered by sequence_number from 0.

Order, as OpenAI sends it: response.created, response.in_progress; per output item output_item.added,
then for a message content_part.added, output_text.delta..., output_text.done, content_part.done, and for a
function call function_call_arguments.delta..., .done; output_item.done; last response.completed (or
response.incomplete when max_output_tokens cut it, response.failed on an error).
"""

from __future__ import annotations

import json
from typing import Any

from webapp.api.services.responses_render import (
    ResponseSpec,
    error_object,
    function_call_item,
    response_object,
    status_of,
    usage_object,
)
from webapp.api.services.responses_request import message_item
from webapp.core.errors import MooncakeError


def typed_event(payload: dict[str, Any]) -> bytes:
    """One SSE frame with its event name: `event: <type>\\ndata: <json>\\n\\n`."""
    data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return f"event: {payload['type']}\ndata: {data}\n\n".encode()


class ResponseEvents:
    """Turns chat chunks into events, keeping the output built so far and the final Response object."""

    def __init__(self, spec: ResponseSpec) -> None:
        self.spec = spec
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.final: dict[str, Any] | None = None
        self._open: dict[str, Any] | None = None
        self._usage: dict[str, Any] | None = None
        self._finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _index(self) -> int:
        return len(self.output) - 1

    def start(self) -> list[dict[str, Any]]:
        snapshot = response_object(self.spec, status="in_progress")
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def chunk(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if chunk.get("usage"):
            self._usage = usage_object(chunk["usage"])
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                events += self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                if call.get("id"):
                    events += self._open_call(call)
                elif call.get("function", {}).get("arguments"):
                    events += self._arguments(call["function"]["arguments"])
            if choice.get("finish_reason"):
                self._finish = choice["finish_reason"]
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self._open is None or self._open["type"] != "message":
            events += self._close("completed")
            events += self._open_message()
        assert self._open is not None
        part = self._open["content"][0]
        part["text"] += text
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=self._open["id"],
                output_index=self._index(),
                content_index=0,
                delta=text,
                logprobs=[],
            )
        )
        return events

    def _open_message(self) -> list[dict[str, Any]]:
        item = message_item("assistant", "", status="in_progress")
        self._open = item
        self.output.append(item)
        added = dict(item, content=[])
        part = dict(item["content"][0])
        return [
            self._event("response.output_item.added", output_index=self._index(), item=added),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=self._index(),
                content_index=0,
                part=part,
            ),
        ]

    def _open_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._close("completed")
        arguments = call.get("function", {}).get("arguments", "")
        item = function_call_item(
            {"id": call["id"], "function": {"name": call["function"]["name"], "arguments": ""}},
            status="in_progress",
        )
        self._open = item
        self.output.append(item)
        events.append(self._event("response.output_item.added", output_index=self._index(), item=dict(item)))
        if arguments:
            events += self._arguments(arguments)
        return events

    def _arguments(self, delta: str) -> list[dict[str, Any]]:
        if self._open is None or self._open["type"] != "function_call":
            return []
        self._open["arguments"] += delta
        return [
            self._event(
                "response.function_call_arguments.delta",
                item_id=self._open["id"],
                output_index=self._index(),
                delta=delta,
            )
        ]

    def _close(self, status: str) -> list[dict[str, Any]]:
        item, self._open = self._open, None
        if item is None:
            return []
        item["status"] = status
        index, events = self._index(), []
        if item["type"] == "message":
            part = item["content"][0]
            common = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(self._event("response.output_text.done", **common, text=part["text"], logprobs=[]))
            events.append(self._event("response.content_part.done", **common, part=dict(part)))
        else:
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def finish(self, model: str) -> list[dict[str, Any]]:
        """Close what is open and end with response.completed or response.incomplete."""
        self.spec.model = model
        status, reason = status_of(self._finish)
        item_status = "completed" if status == "completed" else "incomplete"
        events = self._close(item_status)
        if not self.output:  # an empty answer is still a message, as in the non-streamed object
            events += self._open_message()
            events += self._close(item_status)
        self.final = response_object(
            self.spec, status=status, output=self.output, usage=self._usage, incomplete_reason=reason
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append(self._event(kind, response=self.final))
        return events

    def failed(self, exc: MooncakeError) -> dict[str, Any]:
        """response.failed for an error after the stream started (engine error, time-out, server stop)."""
        self.final = response_object(
            self.spec, status="failed", output=self.output, error=error_object(exc.code, exc.message)
        )
        return self._event("response.failed", response=self.final)
