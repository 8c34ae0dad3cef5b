"""Thumbs up/down with an optional comment on replies, by the chat's owner only."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.organize.conftest import HTMX, MakeChat
from webapp.chat import events
from webapp.chat.models import Message
from webapp.organize.models import FEEDBACK_COMMENT_MAX, Feedback

pytestmark = [pytest.mark.database, pytest.mark.django_db]


def _reply(chat_user: User, make_chat: MakeChat) -> Message:
    chat = make_chat(chat_user)
    return Message.objects.get(conversation=chat, role="assistant")


def _post(client: Client, message: Message, **data: str) -> tuple[int, str]:
    response = client.post(reverse("organize:feedback", args=[message.pk]), data, headers=HTMX)
    return response.status_code, response.content.decode()


def test_rate_comment_change_and_take_back(client: Client, alice: User, make_chat: MakeChat) -> None:
    reply = _reply(alice, make_chat)
    status, html = _post(client, reply, rating="down")
    assert status == 200 and 'value="down"' in html and 'aria-pressed="true"' in html
    assert '<details class="fb-comment" open>' in html  # The comment box opens after a thumb.
    feedback = Feedback.objects.get()
    assert (feedback.rating, feedback.comment, feedback.model, feedback.user) == ("down", "", "tiny", alice)

    status, html = _post(client, reply, rating="down", comment="  Wrong capital city.  ")
    assert status == 200 and "Thanks for the feedback" in html
    assert Feedback.objects.get().comment == "Wrong capital city."

    # Changing the thumb keeps the comment; the same thumb again takes the rating back.
    _post(client, reply, rating="up")
    assert Feedback.objects.get().rating == "up" and Feedback.objects.get().comment == "Wrong capital city."
    status, html = _post(client, reply, rating="up")
    assert status == 200 and not Feedback.objects.exists() and 'aria-pressed="true"' not in html


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "Choose thumbs up or thumbs down."),
        ({"rating": "meh"}, "Choose thumbs up or thumbs down."),
        ({"rating": "up", "comment": "x" * (FEEDBACK_COMMENT_MAX + 1)}, "at most 1000 characters"),
    ],
)
def test_bad_input_is_400_with_the_reason(
    client: Client, alice: User, make_chat: MakeChat, data: dict[str, str], message: str
) -> None:
    reply = _reply(alice, make_chat)
    status, html = _post(client, reply, **data)
    assert status == 400 and message in html
    assert not Feedback.objects.exists()


def test_only_replies_and_not_while_streaming(client: Client, alice: User, make_chat: MakeChat) -> None:
    reply = _reply(alice, make_chat)
    question = Message.objects.get(conversation=reply.conversation, role="user")
    status, html = _post(client, question, rating="up")
    assert status == 400 and "replies can be rated" in html
    reply.status = Message.Status.STREAMING
    reply.save()
    status, html = _post(client, reply, rating="up")
    assert status == 400 and "finish" in html
    assert not Feedback.objects.exists()


def test_someone_elses_reply_is_404(client: Client, alice: User, bob: User, make_chat: MakeChat) -> None:
    reply = _reply(bob, make_chat)
    assert _post(client, reply, rating="down")[0] == 404
    assert client.post(reverse("organize:feedback", args=[999999]), {"rating": "up"}).status_code == 404
    assert not Feedback.objects.exists()


def test_the_chat_page_shows_the_control_with_the_stored_rating(
    client: Client, alice: User, make_chat: MakeChat
) -> None:
    reply = _reply(alice, make_chat)
    Feedback.objects.create(message=reply, user=alice, rating="up", comment="great")
    html = client.get(reverse("chat:detail", args=[reply.conversation_id])).content.decode()
    assert f'id="fb-{reply.pk}"' in html and "Edit comment" in html and ">great</textarea>" in html


def test_socket_rendering_in_the_event_loop_makes_no_query(alice: User, make_chat: MakeChat) -> None:
    reply = _reply(alice, make_chat)

    async def render() -> str:
        return events.message_html(reply)  # Would raise SynchronousOnlyOperation if it queried.

    html = asyncio.run(render())
    assert f'id="fb-{reply.pk}"' in html and 'aria-pressed="true"' not in html
