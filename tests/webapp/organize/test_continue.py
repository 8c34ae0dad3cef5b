"""Continue in a new chat: a logged-in viewer of a shared chat gets a copy of its thread as a chat of their
own, and the shared chat stays as it was."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.organize.conftest import MakeChat
from webapp.chat import selectors as chat_selectors
from webapp.chat.models import Conversation, Message
from webapp.core.errors import InvalidRequest
from webapp.organize import services

pytestmark = [pytest.mark.database, pytest.mark.django_db]


def _shared_path(chat: Conversation) -> tuple[str, str]:
    _, token = services.share_create(conversation=chat)
    return token, reverse("organize:shared", args=[token])


def test_a_viewer_continues_a_shared_chat_in_a_chat_of_their_own(
    client: Client, alice: User, bob: User, make_chat: MakeChat
) -> None:
    chat = make_chat(alice, "Bread", ask="How do I bake bread?", reply="Flour, water, yeast.")
    chat.system_prompt = "Alice's private instructions."
    chat.save()
    token, path = _shared_path(chat)
    reader = Client()
    reader.force_login(bob)
    page = reader.get(path).content.decode()
    assert "Continue in a new chat" in page and reverse("organize:shared-continue", args=[token]) in page
    response = reader.post(reverse("organize:shared-continue", args=[token]))
    copy = Conversation.objects.get(user=bob)
    assert response.status_code == 302 and response["Location"] == reverse("chat:detail", args=[copy.pk])
    assert copy.title == "Bread" and copy.system_prompt != chat.system_prompt
    thread = chat_selectors.active_path(conversation=copy)
    assert [(m.role, m.content) for m in thread] == [
        ("user", "How do I bake bread?"),
        ("assistant", "Flour, water, yeast."),
    ]
    assert thread[1].parent_id == thread[0].pk and thread[1].model == "tiny"
    # The copy is Bob's to go on with; Alice's chat is untouched.
    assert reader.get(reverse("chat:detail", args=[copy.pk])).status_code == 200
    assert Message.objects.filter(conversation=chat).count() == 2


def test_only_the_thread_on_screen_is_copied(alice: User, bob: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, ask="first", reply="old answer")
    first = Message.objects.get(conversation=chat, role="user")
    newer = Message.objects.create(conversation=chat, role="assistant", content="new answer", parent=first)
    failed = Message.objects.create(
        conversation=chat, role="user", content="", parent=newer, status=Message.Status.ERROR
    )
    assert failed.pk
    share, _ = services.share_create(conversation=chat)
    copy = services.share_continue(share=share, user=bob)
    assert [m.content for m in chat_selectors.active_path(conversation=copy)] == ["first", "new answer"]


def test_an_empty_shared_chat_cannot_be_continued(client: Client, alice: User, bob: User) -> None:
    chat = Conversation.objects.create(user=alice, title="Empty")
    token, path = _shared_path(chat)
    reader = Client()
    reader.force_login(bob)
    assert "Continue in a new chat" not in reader.get(path).content.decode()
    response = reader.post(reverse("organize:shared-continue", args=[token]), follow=True)
    assert "no messages to continue from" in response.content.decode()
    assert not Conversation.objects.filter(user=bob).exists()
    with pytest.raises(InvalidRequest):
        services.share_continue(share=chat.shares.get(), user=bob)


def test_a_revoked_or_unknown_link_and_a_visitor_cannot_continue(
    client: Client, alice: User, make_chat: MakeChat
) -> None:
    chat = make_chat(alice)
    token, _ = _shared_path(chat)
    url = reverse("organize:shared-continue", args=[token])
    visitor = Client()
    assert visitor.post(url).status_code == 302  # to the login page
    assert client.get(url).status_code == 405
    assert client.post(reverse("organize:shared-continue", args=["nope"])).status_code == 404
    services.share_revoke(share=chat.shares.get())
    assert client.post(url).status_code == 404
    assert Conversation.objects.count() == 1
