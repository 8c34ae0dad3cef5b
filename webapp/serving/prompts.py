"""Prompts to token ids, and the one prompt check: every 400 about a prompt, for chat and API alike.

All of it is CPU work (chat templates, tokenizers): callers run it off the event loop.
"""

from __future__ import annotations

import json
from typing import Any

from inference.api import EngineClient
from webapp.core.errors import InvalidRequest


def vocab_size(engine: EngineClient) -> int:
    """Ids the tokenizer can decode: the range token-id prompts and logit_bias keys must fall in."""
    return len(engine.tokenizer)


def tools_system_prompt(tools: list[dict[str, Any]]) -> str:
    """Hermes-style tool description, the format most small open models were tuned on."""
    signatures = "\n".join(json.dumps(t) for t in tools)
    return (
        "You may call one or more functions to assist with the user query. Function signatures are within "
        f"<tools></tools> XML tags:\n<tools>\n{signatures}\n</tools>\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json>}\n'
        "</tool_call>"
    )


def render_chat(
    engine: EngineClient,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of the conversation under the model's chat template (tools included when given)."""
    try:
        if not tools:
            return list(engine.apply_chat_template(messages, add_generation_prompt=add_generation_prompt))
        with_tools = list(
            engine.apply_chat_template(messages, tools=tools, add_generation_prompt=add_generation_prompt)
        )
        without = list(engine.apply_chat_template(messages, add_generation_prompt=add_generation_prompt))
        if with_tools != without:
            return with_tools
        # The template ignores tools: describe them in the system message instead.
        return list(
            engine.apply_chat_template(
                _with_system(messages, tools_system_prompt(tools)),
                add_generation_prompt=add_generation_prompt,
            )
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidRequest(
            f"the chat template could not render these messages: {exc}", param="messages"
        ) from exc
    except Exception as exc:
        # jinja2's TemplateError (e.g. a template's raise_exception about role order) is the caller's input.
        if type(exc).__module__.startswith("jinja2"):
            raise InvalidRequest(
                f"the chat template rejected these messages: {exc}", param="messages"
            ) from exc
        raise


def render_continuation(engine: EngineClient, messages: list[dict[str, Any]], partial: str) -> list[int]:
    """Token ids that end inside an assistant turn holding `partial`, so the model goes on with that text
    (continue_final_message). The template renders the turn closed; its closing tokens are what an empty
    turn adds after the generation prompt, and are cut off. A template that renders otherwise gets the
    generation prompt followed by the encoded text."""
    head = render_chat(engine, messages)
    closed = render_chat(
        engine, [*messages, {"role": "assistant", "content": partial}], add_generation_prompt=False
    )
    empty = render_chat(
        engine, [*messages, {"role": "assistant", "content": ""}], add_generation_prompt=False
    )
    suffix = empty[len(head) :] if empty[: len(head)] == head else None
    end = len(closed) - len(suffix) if suffix is not None else -1
    if suffix is not None and end > len(head) and closed[: len(head)] == head and closed[end:] == suffix:
        return closed[:end]
    return head + encode_text(engine, partial)


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
        raise InvalidRequest("The prompt is empty.", param=param)
    vocab = vocab_size(engine)
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise InvalidRequest(f"Token id {bad} is out of vocabulary (size {vocab}).", param=param)
    limit = int(engine.max_model_len)
    if len(ids) >= limit:
        raise InvalidRequest(
            f"This model's maximum context length is {limit} tokens; the prompt has {len(ids)}.",
            param=param,
            code="context_length_exceeded",
        )
    if max_tokens is None:
        return limit - len(ids)
    if len(ids) + max_tokens > limit:
        raise InvalidRequest(
            f"This model's maximum context length is {limit} tokens; the prompt ({len(ids)}) plus "
            f"max_tokens ({max_tokens}) is {len(ids) + max_tokens}.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return max_tokens
