"""The console's Feedback page and its read-only chat view: staff only."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.organize.conftest import MakeChat
from webapp.chat.models import Conversation, Message
from webapp.console.models import AuditLog
from webapp.organize.models import Feedback

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.fixture
def admin_client() -> Client:
    admin = User.objects.create_user("root", password="pw", is_staff=True)
    client = Client()
    client.force_login(admin)
    return client


def _rate(user: User, make_chat: MakeChat, *, rating: str, comment: str, model: str, title: str) -> Message:
    chat = make_chat(user, title, reply=f"reply for {title}")
    reply = Message.objects.get(conversation=chat, role="assistant")
    reply.model = model
    reply.save()
    Feedback.objects.create(message=reply, user=user, rating=rating, comment=comment, model=model)
    return reply


def test_list_and_filters(admin_client: Client, bob: User, make_chat: MakeChat) -> None:
    _rate(bob, make_chat, rating="down", comment="made up <facts>", model="tiny", title="History")
    _rate(bob, make_chat, rating="up", comment="spot on", model="big", title="Maths")
    html = admin_client.get(reverse("console:feedback")).content.decode()
    assert "made up &lt;facts&gt;" in html and "spot on" in html and "bob" in html
    assert 'aria-current="page">Feedback</a>' in html
    down = admin_client.get(reverse("console:feedback"), {"rating": "down"}).content.decode()
    assert "made up" in down and "spot on" not in down
    big = admin_client.get(reverse("console:feedback"), {"model": "big"}).content.decode()
    assert "spot on" in big and "made up" not in big
    # A filter that does not validate is ignored, not an error.
    assert (
        admin_client.get(reverse("console:feedback"), {"rating": "sideways", "page": "x"}).status_code == 200
    )


def test_chat_view_shows_the_feedback_beside_the_reply(
    admin_client: Client, bob: User, make_chat: MakeChat
) -> None:
    reply = _rate(bob, make_chat, rating="down", comment="wrong year", model="tiny", title="Dates")
    listing = admin_client.get(reverse("console:feedback")).content.decode()
    url = reverse("console:feedback-chat", args=[reply.conversation_id])
    assert url in listing
    html = admin_client.get(url).content.decode()
    assert "reply for Dates" in html and "wrong year" in html and "Bad reply" in html and "bob" in html
    assert admin_client.get(reverse("console:feedback-chat", args=[999999])).status_code == 404


def test_staff_only(client: Client, bob: User, make_chat: MakeChat) -> None:
    reply = _rate(bob, make_chat, rating="up", comment="", model="tiny", title="T")
    for url in (reverse("console:feedback"), reverse("console:feedback-chat", args=[reply.conversation_id])):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]
        client.force_login(bob)
        assert client.get(url).status_code == 403
        client.logout()


def _linear_chat(user: User, turns: list[tuple[str, str]]) -> list[Message]:
    chat = Conversation.objects.create(user=user, title="Private", title_is_custom=True)
    messages: list[Message] = []
    for role, content in turns:
        parent = messages[-1] if messages else None
        messages.append(Message.objects.create(conversation=chat, role=role, content=content, parent=parent))
    return messages


def test_chat_view_shows_only_rated_exchanges_and_is_audited(admin_client: Client, bob: User) -> None:
    messages = _linear_chat(
        bob,
        [("user", "first question"), ("assistant", "first answer"), ("user", "second question"),
         ("assistant", "second answer"), ("user", "a private follow-up"), ("assistant", "its answer")],
    )  # fmt: skip
    Feedback.objects.create(message=messages[3], user=bob, rating="down", comment="off", model="tiny")
    url = reverse("console:feedback-chat", args=[messages[0].conversation_id])
    html = admin_client.get(url).content.decode()
    for shown in ("first question", "first answer", "second question", "second answer", "off"):
        assert shown in html
    assert "a private follow-up" not in html and "its answer" not in html  # after the rated reply
    entry = AuditLog.objects.get(action="feedback.read_chat")
    assert entry.target == f"chat {messages[0].conversation_id} of bob" and entry.after == {"messages": 4}


def test_a_chat_without_feedback_is_not_for_admins_to_read(admin_client: Client, bob: User) -> None:
    owner = User.objects.create_user("owner", password="pw", is_staff=True, is_superuser=True)
    for user in (bob, owner):
        unrated = _linear_chat(user, [("user", "secret"), ("assistant", "kept")])
        response = admin_client.get(reverse("console:feedback-chat", args=[unrated[0].conversation_id]))
        assert response.status_code == 404 and "secret" not in response.content.decode()
    assert not AuditLog.objects.filter(action="feedback.read_chat").exists()
