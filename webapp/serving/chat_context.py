"""Context other apps add to a chat reply's prompt, without the chat importing them.

webapp.documents registers its extender when the app is ready; webapp.chat.admission runs every extender
while preparing a reply, before the prompt is templated and checked. Each gets the chat (its Conversation),
the messages so far and the engine, and returns the messages to template.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from inference.api import EngineClient

Messages = list[dict[str, Any]]
Extender = Callable[[object, Messages, EngineClient], Awaitable[Messages]]

_extenders: dict[str, Extender] = {}


def register(name: str, extender: Extender) -> None:
    """Add (or, under the same name, replace) an extender; they run in the order first registered."""
    _extenders[name] = extender


async def extend_chat_prompt(*, conversation: object, messages: Messages, engine: EngineClient) -> Messages:
    for extender in list(_extenders.values()):
        messages = await extender(conversation, messages, engine)
    return messages
