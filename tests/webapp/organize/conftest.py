from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.chat.models import Conversation, Message

HTMX = {"HX-Request": "true"}
MakeChat = Callable[..., Conversation]


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create_user("alice", password="pw")
    client.force_login(user)
    return user


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


@pytest.fixture
def make_chat() -> MakeChat:
    """A chat with a user message and a complete reply (what the list shows: chats with messages)."""

    def make(user: User, title: str = "A chat", ask: str = "hello", reply: str = "hi there") -> Conversation:
        chat = Conversation.objects.create(user=user, title=title, title_is_custom=True)
        Message.objects.create(conversation=chat, role="user", content=ask)
        Message.objects.create(conversation=chat, role="assistant", content=reply, model="tiny")
        return chat

    return make
