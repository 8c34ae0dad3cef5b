"""The console's defaults applied to API requests: the request, then the model's, then the global ones.

Layering matches the chat app (webapp.chat.selectors): the console's global sampling tuning, overlaid
with the model's own defaults, fill only the fields a request left out; what remains unset keeps
OpenAI's defaults (the engine's SamplingParams defaults).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from pydantic import ValidationError

from webapp.api.schemas.chat import ChatCompletionRequest, ChatMessage
from webapp.api.schemas.common import SamplingFields
from webapp.core.selectors import model_defaults

logger = logging.getLogger(__name__)

# Request fields a console default may fill in; anything else in a model's defaults is ignored.
DEFAULTABLE = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "max_tokens",
    "min_tokens",
)

Body = TypeVar("Body", bound=SamplingFields)


@dataclass(frozen=True, slots=True)
class RequestDefaults:
    sampling: dict[str, Any] = field(default_factory=dict)
    system_prompt: str = ""


def request_defaults(*, model: str) -> RequestDefaults:
    """The console's defaults for `model` (name or alias): global tuning overlaid with the model's own."""
    defaults = model_defaults(model)
    return RequestDefaults(
        sampling=_valid(defaults["sampling"]), system_prompt=str(defaults["system_prompt"] or "")
    )


_reads: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Future[RequestDefaults]] = {}


async def request_defaults_shared(*, model: str) -> RequestDefaults:
    """request_defaults on Django's thread-sensitive path, one read shared by concurrent callers.

    A burst of requests would otherwise queue one identical DB read each on that single thread (4-16 ms
    apiece under load): a caller that arrives while a read for its model is in flight takes its result.
    """
    key = (asyncio.get_running_loop(), model)
    read = _reads.get(key)
    if read is None:
        read = asyncio.ensure_future(sync_to_async(request_defaults)(model=model))
        _reads[key] = read
        read.add_done_callback(lambda done: _reads.pop(key) if _reads.get(key) is done else None)
    # Shielded: one caller going away must not cancel the read the others wait for.
    return await asyncio.shield(read)


def _valid(sampling: dict[str, Any]) -> dict[str, Any]:
    """Defaults the API itself would accept; a bad console value is skipped, not a 400 for every client."""
    out: dict[str, Any] = {}
    for name, value in sampling.items():
        if name not in DEFAULTABLE:
            continue
        try:
            checked = SamplingFields.model_validate({name: value})
        except ValidationError:
            logger.warning("ignoring console default %s=%r: not a valid API value", name, value)
            continue
        out[name] = getattr(checked, name)
    return out


def _omitted(body: SamplingFields, name: str) -> bool:
    # An explicit null means "use the default", as in OpenAI's API.
    if name == "max_tokens" and isinstance(body, ChatCompletionRequest):
        return body.token_limit() is None
    return name not in body.model_fields_set or getattr(body, name) is None


def apply_sampling_defaults(body: Body, defaults: RequestDefaults) -> Body:
    """`body` with the defaults filled into the fields it omitted; explicit request values always win."""
    update = {k: v for k, v in defaults.sampling.items() if _omitted(body, k)}
    return body.model_copy(update=update) if update else body


def apply_system_prompt(messages: list[ChatMessage], defaults: RequestDefaults) -> list[ChatMessage]:
    """The model's default system prompt first, unless the request brings its own system message."""
    if not defaults.system_prompt or any(m.role in ("system", "developer") for m in messages):
        return messages
    return [ChatMessage(role="system", content=defaults.system_prompt), *messages]


def apply_chat_defaults(body: ChatCompletionRequest, defaults: RequestDefaults) -> ChatCompletionRequest:
    body = apply_sampling_defaults(body, defaults)
    messages = apply_system_prompt(body.messages, defaults)
    return body.model_copy(update={"messages": messages}) if messages is not body.messages else body
