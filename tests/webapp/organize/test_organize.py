"""Pin, archive, folders and the organised sidebar; someone else's ids are always a 404."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.organize.conftest import HTMX, MakeChat
from webapp.chat.models import Conversation
from webapp.organize import services
from webapp.organize.models import Folder, Placement

pytestmark = [pytest.mark.database, pytest.mark.django_db]


def _order(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'id="conv-(\d+)"', html)]


def _list(client: Client, **params: str) -> str:
    response = client.get(reverse("chat:list"), params)
    assert response.status_code == 200
    return response.content.decode()


def test_pinned_first_then_folders_then_recent_and_archive_apart(
    client: Client, alice: User, make_chat: MakeChat
) -> None:
    old, filed, pinned, newest, gone = (
        make_chat(alice, t) for t in ("Old", "Filed", "Pinned", "Newest", "Gone")
    )
    folder = services.folder_create(user=alice, name="Work")
    client.post(reverse("organize:pin", args=[pinned.pk]), {"on": "1"}, headers=HTMX)
    client.post(reverse("organize:move", args=[filed.pk]), {"folder": str(folder.pk)}, headers=HTMX)
    response = client.post(reverse("organize:archive", args=[gone.pk]), {"on": "1"}, headers=HTMX)
    assert response.status_code == 200
    for html in (response.content.decode(), _list(client)):
        assert _order(html) == [pinned.pk, filed.pk, newest.pk, old.pk, gone.pk]
        pinned_section = html.split('id="org-section-pinned"')[1].split("</ul>")[0]
        assert f'id="conv-{pinned.pk}"' in pinned_section and f'id="conv-{newest.pk}"' not in pinned_section
        assert f'id="conv-{filed.pk}"' in html.split('id="org-section-folder-')[1].split("</ul>")[0]
        archived = html.split('id="org-section-archived"')[1]
        assert _order(archived) == [gone.pk]  # Out of the main list, in the archive section only.
        assert 'class="org-heading">Archived <span class="org-count">1</span>' in html
    # Unpin and unarchive put them back among the recent chats.
    client.post(reverse("organize:pin", args=[pinned.pk]), {"on": "0"}, headers=HTMX)
    client.post(reverse("organize:archive", args=[gone.pk]), {"on": "0"}, headers=HTMX)
    recent = _list(client).split('id="org-section-recent"')[1]
    assert set(_order(recent)) == {old.pk, pinned.pk, newest.pk, gone.pk}


def test_archiving_unpins(alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice)
    services.conversation_pin(conversation=chat, pinned=True)
    placement = services.conversation_archive(conversation=chat, archived=True)
    assert placement.pinned_at is None and placement.archived_at is not None


def test_item_menu_lists_own_folders_and_state(
    client: Client, alice: User, bob: User, make_chat: MakeChat
) -> None:
    chat = make_chat(alice)
    services.folder_create(user=alice, name="Mine")
    services.folder_create(user=bob, name="Bobs")
    html = client.get(reverse("organize:menu", args=[chat.pk])).content.decode()
    assert "Pin to top" in html and "Archive" in html and "Mine" in html and "Bobs" not in html
    assert reverse("organize:shares", args=[chat.pk]) in html
    services.conversation_pin(conversation=chat, pinned=True)
    assert "Unpin" in client.get(reverse("organize:menu", args=[chat.pk])).content.decode()


def test_folder_create_rename_delete_keeps_chats(client: Client, alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice)
    response = client.post(reverse("organize:folder-create"), {"name": "  Research   notes "}, headers=HTMX)
    assert response.status_code == 200 and "Research notes" in response.content.decode()
    folder = Folder.objects.get(user=alice)
    assert folder.name == "Research notes"
    client.post(reverse("organize:move", args=[chat.pk]), {"folder": str(folder.pk)}, headers=HTMX)
    client.post(reverse("organize:folder-rename", args=[folder.pk]), {"name": "Papers"}, headers=HTMX)
    folder.refresh_from_db()
    assert folder.name == "Papers"
    client.post(reverse("organize:folder-delete", args=[folder.pk]), headers=HTMX)
    assert not Folder.objects.exists()
    assert Conversation.objects.filter(pk=chat.pk).exists()
    assert Placement.objects.get(conversation=chat).folder is None
    assert f'id="conv-{chat.pk}"' in _list(client).split('id="org-section-recent"')[1]


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "A folder needs a name."), ("   ", "A folder needs a name."), ("x" * 81, "at most 80 characters")],
)
def test_folder_name_errors_are_inline(client: Client, alice: User, name: str, message: str) -> None:
    response = client.post(reverse("organize:folder-create"), {"name": name}, headers=HTMX)
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html and 'aria-invalid="true"' in html
    assert not Folder.objects.exists()


def test_duplicate_folder_name(client: Client, alice: User) -> None:
    services.folder_create(user=alice, name="Work")
    response = client.post(reverse("organize:folder-create"), {"name": "Work"}, headers=HTMX)
    assert response.status_code == 400 and "already have a folder" in response.content.decode()
    other = services.folder_create(user=alice, name="Home")
    response = client.post(reverse("organize:folder-rename", args=[other.pk]), {"name": "Work"}, headers=HTMX)
    assert response.status_code == 400 and "already have a folder" in response.content.decode()


def test_without_htmx_the_forms_redirect_back(client: Client, alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice)
    response = client.post(
        reverse("organize:pin", args=[chat.pk]),
        {"on": "1"},
        headers={"HX-Current-URL": f"http://x/chat/{chat.pk}/"},
    )
    assert response.status_code == 302
    response = client.post(reverse("organize:folder-create"), {"name": ""})
    assert response.status_code == 302


@pytest.mark.parametrize("value", ["", "yes", "2", "x" * 5000])
def test_bad_flag_values_are_400(client: Client, alice: User, make_chat: MakeChat, value: str) -> None:
    chat = make_chat(alice)
    for name in ("pin", "archive"):
        response = client.post(reverse(f"organize:{name}", args=[chat.pk]), {"on": value}, headers=HTMX)
        assert response.status_code == 400
    assert not Placement.objects.exists()


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1.5"])
def test_bad_folder_values_are_400(client: Client, alice: User, make_chat: MakeChat, value: str) -> None:
    chat = make_chat(alice)
    response = client.post(reverse("organize:move", args=[chat.pk]), {"folder": value}, headers=HTMX)
    assert response.status_code == 400


def test_someone_elses_ids_are_404(client: Client, alice: User, bob: User, make_chat: MakeChat) -> None:
    mine = make_chat(alice)
    theirs = make_chat(bob, "Bob's chat")
    their_folder = services.folder_create(user=bob, name="Bob's folder")
    my_folder = services.folder_create(user=alice, name="Mine")
    posts = [
        (reverse("organize:pin", args=[theirs.pk]), {"on": "1"}),
        (reverse("organize:archive", args=[theirs.pk]), {"on": "1"}),
        (reverse("organize:move", args=[theirs.pk]), {"folder": str(my_folder.pk)}),
        (reverse("organize:move", args=[mine.pk]), {"folder": str(their_folder.pk)}),
        (reverse("organize:folder-rename", args=[their_folder.pk]), {"name": "mine now"}),
        (reverse("organize:folder-delete", args=[their_folder.pk]), {}),
        (reverse("organize:pin", args=[999999]), {"on": "1"}),
    ]
    for url, data in posts:
        assert client.post(url, data, headers=HTMX).status_code == 404, url
    assert client.get(reverse("organize:menu", args=[theirs.pk])).status_code == 404
    their_folder.refresh_from_db()
    assert their_folder.name == "Bob's folder"
    assert not Placement.objects.exists()
    # Bob's chats and folders never show in Alice's list.
    html = _list(client)
    assert "Bob" not in html


def test_anonymous_is_sent_to_login(make_chat: MakeChat, bob: User) -> None:
    chat = make_chat(bob)
    response = Client().post(reverse("organize:pin", args=[chat.pk]), {"on": "1"})
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_get_is_refused_on_writes(client: Client, alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice)
    assert client.get(reverse("organize:pin", args=[chat.pk])).status_code == 405


def test_recent_pages_and_socket_rendered_item(client: Client, alice: User, make_chat: MakeChat) -> None:
    for i in range(33):
        make_chat(alice, f"chat {i}")
    page1 = _list(client)
    assert page1.count('class="conv-item') == 30 and 'hx-trigger="intersect once"' in page1
    page2 = client.get(reverse("organize:list"), {"page": "2"}).content.decode()
    assert page2.count('class="conv-item') == 3 and "org-section" not in page2
    # The socket renders an item without a request or placement: it must not query, and says "".
    from webapp.chat import events

    chat = Conversation.objects.filter(user=alice).first()
    assert chat is not None
    assert 'data-section=""' in events.conversation(chat)["html"]


def test_search_through_the_list_view(client: Client, alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, "Trip", ask="pack the <b>tent</b>", reply="and a stove")
    services.conversation_archive(conversation=chat, archived=True)
    html = _list(client, q="tent", current=str(chat.pk))
    assert f'id="hit-{chat.pk}"' in html and "search-hit current" in html
    assert "<mark>tent</mark>" in html and "Archived" in html and "<b>" not in html
    assert "No chats match" in _list(client, q='"NEAR(')
