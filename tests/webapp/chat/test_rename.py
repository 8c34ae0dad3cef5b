"""Renaming a chat: the service's rules (blank, too long), the header's field and the list's in-place
field (the ⋯ menu's Rename), each only for the chat's owner, each persisting and telling open tabs."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.chat import services
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest

pytestmark = [pytest.mark.django_db, pytest.mark.database]
HTMX = {"HX-Request": "true"}


@pytest.fixture
def signed_in(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def bobs_chat() -> Conversation:
    bob = User.objects.create_user("bob", password="pw")
    return services.conversation_rename(conversation=services.conversation_create(user=bob), title="Bob's")


@pytest.fixture
def broadcasts(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, tuple[dict[str, object], ...]]]:
    sent: list[tuple[int, tuple[dict[str, object], ...]]] = []

    async def record(conversation_id: int, *payloads: dict[str, object]) -> None:
        sent.append((conversation_id, payloads))

    monkeypatch.setattr("webapp.chat.events.broadcast", record)
    return sent


def in_list(title: str) -> dict[str, str]:
    return {"title": title, "place": "list"}


def test_the_service_keeps_the_title_and_refuses_blank_or_too_long(chat: Conversation) -> None:
    services.conversation_rename(conversation=chat, title="  Trip \n plans ")
    chat.refresh_from_db()
    assert (chat.title, chat.title_is_custom) == ("Trip plans", True)
    exactly = "x" * services.MAX_TITLE_CHARS
    assert services.conversation_rename(conversation=chat, title=exactly).title == exactly
    for bad, reason in (("   ", "blank"), ("y" * (services.MAX_TITLE_CHARS + 1), "longer than 200")):
        with pytest.raises(InvalidRequest) as refused:
            services.conversation_rename(conversation=chat, title=bad)
        assert reason in refused.value.message and refused.value.param == "title"
    chat.refresh_from_db()
    assert chat.title == exactly  # never cut short or blanked


def test_the_header_field_says_why_a_long_title_is_refused(signed_in: Client, chat: Conversation) -> None:
    services.conversation_rename(conversation=chat, title="Kept")
    url = reverse("chat:rename", args=[chat.pk])
    response = signed_in.post(url, {"title": "z" * 201}, headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="title-error"' in html and "The title is longer than 200 characters." in html
    chat.refresh_from_db()
    assert chat.title == "Kept"


def test_the_menu_offers_rename(signed_in: Client, chat: Conversation) -> None:
    html = signed_in.get(reverse("organize:menu", args=[chat.pk])).content.decode()
    assert (
        'class="menu-item org-rename"' in html
        and f'hx-get="{reverse("chat:rename", args=[chat.pk])}"' in html
    )


def test_rename_in_the_list(
    signed_in: Client, chat: Conversation, broadcasts: list[tuple[int, tuple[dict[str, object], ...]]]
) -> None:
    url = reverse("chat:rename", args=[chat.pk])
    on_page = {**HTMX, "HX-Current-URL": "http://testserver" + reverse("chat:detail", args=[chat.pk])}
    # The entry becomes a field holding the title, under the entry's own id so each swaps for the other.
    field = signed_in.get(url, headers=on_page).content.decode()
    assert f'id="conv-{chat.pk}"' in field and "conv-renaming current" in field
    assert 'name="place" value="list"' in field and f'value="{chat.title}"' in field
    assert 'maxlength="200"' in field and "autofocus" in field and "{#" not in field

    response = signed_in.post(url, in_list("  Tax  return 2024 "), headers=on_page)
    html = response.content.decode()
    assert response.status_code == 200
    assert f'id="conv-{chat.pk}"' in html and '<span class="conv-title">Tax return 2024</span>' in html
    assert "conv-rename-form" not in html and "conv-item current" in html
    chat.refresh_from_db()
    assert (chat.title, chat.title_is_custom) == ("Tax return 2024", True)
    assert broadcasts == [(chat.pk, ({"type": "title", "title": "Tax return 2024"},))]
    # It lasts: the next page shows it.
    page = signed_in.get(reverse("chat:detail", args=[chat.pk])).content.decode()
    assert "<title>Tax return 2024" in page


@pytest.mark.parametrize(
    ("typed", "reason"), [("   ", "The title cannot be blank."), ("q" * 250, "longer than 200 characters")]
)
def test_a_refused_title_comes_back_in_the_field(
    signed_in: Client,
    chat: Conversation,
    broadcasts: list[tuple[int, tuple[dict[str, object], ...]]],
    typed: str,
    reason: str,
) -> None:
    services.conversation_rename(conversation=chat, title="Kept")
    response = signed_in.post(reverse("chat:rename", args=[chat.pk]), in_list(typed), headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 400
    assert f'id="conv-rename-error-{chat.pk}"' in html and reason in html
    assert 'aria-invalid="true"' in html and f'aria-describedby="conv-rename-error-{chat.pk}"' in html
    if typed.strip():
        assert f'value="{typed}"' in html  # what was typed stays, to be shortened
    chat.refresh_from_db()
    assert chat.title == "Kept" and broadcasts == []


def test_cancelling_puts_the_entry_back(signed_in: Client, chat: Conversation) -> None:
    services.conversation_rename(conversation=chat, title="Unchanged")
    html = signed_in.get(reverse("chat:item", args=[chat.pk]), headers=HTMX).content.decode()
    assert f'id="conv-{chat.pk}"' in html and '<span class="conv-title">Unchanged</span>' in html
    assert "current" not in html.split(">", 1)[0]  # asked from no chat page: not marked as the open one


def test_only_the_owner_renames(signed_in: Client, bobs_chat: Conversation) -> None:
    url = reverse("chat:rename", args=[bobs_chat.pk])
    assert signed_in.get(url, headers=HTMX).status_code == 404
    assert signed_in.post(url, in_list("mine now"), headers=HTMX).status_code == 404
    assert signed_in.post(url, {"title": "mine now"}, headers=HTMX).status_code == 404
    assert signed_in.get(reverse("chat:item", args=[bobs_chat.pk])).status_code == 404
    bobs_chat.refresh_from_db()
    assert bobs_chat.title == "Bob's"


def test_rename_needs_login(client: Client, chat: Conversation) -> None:
    for response in (
        client.get(reverse("chat:rename", args=[chat.pk])),
        client.post(reverse("chat:rename", args=[chat.pk]), {"title": "x"}),
        client.get(reverse("chat:item", args=[chat.pk])),
    ):
        assert response.status_code == 302 and "/login/" in response["Location"]
    assert client.delete(reverse("chat:rename", args=[chat.pk])).status_code in (302, 405)
