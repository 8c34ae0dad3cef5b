"""Responses input items as stored items and as the chat messages they replay as (no server needed)."""

from __future__ import annotations

from webapp.api.schemas.responses import ResponsesRequest
from webapp.api.services.responses_request import chat_messages, chat_request, input_items


def test_items_get_ids_and_the_stored_shapes() -> None:
    body = ResponsesRequest.model_validate(
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}],
                },
                {"id": "msg_mine", "role": "assistant", "content": "c"},
                {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "call_1",
                    "output": [{"type": "input_text", "text": "4"}],
                },
            ]
        }
    )
    user, assistant, call, output = input_items(body)
    assert user["id"].startswith("msg_") and user["content"] == [{"type": "input_text", "text": "ab"}]
    assert assistant["id"] == "msg_mine"
    assert assistant["content"] == [{"type": "output_text", "text": "c", "annotations": []}]
    assert call["id"].startswith("fc_") and call["status"] == "completed"
    assert output["id"].startswith("fco_") and output["output"] == "4"
    assert input_items(ResponsesRequest.model_validate({"input": "hi"}))[0]["role"] == "user"


def test_a_turns_calls_join_its_assistant_message() -> None:
    body = ResponsesRequest.model_validate(
        {
            "input": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "Checking."},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"x": 1}'},
                {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "one"},
                {"type": "function_call_output", "call_id": "c2", "output": "two"},
            ]
        }
    )
    messages = chat_messages(input_items(body))
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1]["content"] == "Checking."
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c1", "c2"]
    assert messages[3] == {"role": "tool", "content": "two", "tool_call_id": "c2"}


def test_the_chat_request_carries_tools_format_and_sampling() -> None:
    body = ResponsesRequest.model_validate(
        {
            "input": "hi",
            "instructions": "sys",
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "max_output_tokens": 9,
            "temperature": 0.2,
            "top_p": 0.5,
            "seed": 1,
            "stop": "END",
        }
    )
    history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "before"}]}]
    chat = chat_request(body, history, input_items(body), stream=True)
    assert [(m.role, m.content) for m in chat.messages] == [
        ("system", "sys"),
        ("user", "before"),
        ("user", "hi"),
    ]
    assert chat.tools is not None and chat.tools[0].function.name == "f"
    assert chat.tool_choice is not None and chat.tool_choice.function.name == "f"  # type: ignore[union-attr]
    assert (chat.max_completion_tokens, chat.temperature, chat.top_p, chat.seed, chat.stop) == (
        9,
        0.2,
        0.5,
        1,
        "END",
    )
    assert chat.stream and chat.stream_options is not None and chat.stream_options.include_usage
    fmt = {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}}
    with_format = ResponsesRequest.model_validate({"input": "x", "text": fmt})
    formatted = chat_request(with_format, [], input_items(with_format), stream=False)
    assert formatted.response_format is not None and formatted.response_format.type == "json_schema"
    assert formatted.response_format.json_schema is not None
    assert formatted.response_format.json_schema.json_schema == {"type": "object"}
