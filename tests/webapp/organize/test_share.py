"""Read-only share links: only the hash is stored, logged-in users read, the owner revokes, nobody writes."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.webapp.organize.conftest import MakeChat
from webapp.chat.models import Conversation
from webapp.organize import services
from webapp.organize.models import Share

pytestmark = pytest.mark.django_db


def _create(client: Client, chat: Conversation) -> str:
    response = client.post(reverse("organize:shares", args=[chat.pk]))
    assert response.status_code == 200
    match = re.search(r'value="http://testserver(/chat/shared/[\w-]+/)"', response.content.decode())
    assert match, "the new link is shown once"
    return match.group(1)


@pytest.mark.database
def test_create_open_revoke(client: Client, alice: User, bob: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, "Recipes", ask="How do I bake bread?", reply="Use **flour**, water, yeast.")
    path = _create(client, chat)
    token = path.split("/")[3]
    share = Share.objects.get()
    assert share.token_hash == services.hash_token(token) and token not in share.token_hash
    assert token[: services.SHARE_PREFIX_LEN] == share.prefix
    listing = client.get(reverse("organize:shares", args=[chat.pk])).content.decode()
    assert share.prefix in listing and token not in listing  # Never shown again.

    reader = Client()
    reader.force_login(bob)
    response = reader.get(path)
    html = response.content.decode()
    assert response.status_code == 200
    assert "How do I bake bread?" in html and "<strong>flour</strong>" in html and "Shared by alice" in html
    assert response["Referrer-Policy"] == "same-origin"  # links out do not carry the token
    assert "<textarea" not in html and "composer" not in html  # Read-only: nothing to write with.

    response = client.post(reverse("organize:share-revoke", args=[share.pk]))
    assert response.status_code == 302
    assert reader.get(path).status_code == 404
    assert "No active links" in client.get(reverse("organize:shares", args=[chat.pk])).content.decode()


@pytest.mark.database
def test_anonymous_goes_to_login(client: Client, alice: User, make_chat: MakeChat) -> None:
    path = _create(client, make_chat(alice))
    response = Client().get(path)
    assert response.status_code == 302 and response["Location"].startswith("/login/")


@pytest.mark.database
def test_reader_cannot_write_to_the_chat(client: Client, alice: User, bob: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice, "Mine")
    _create(client, chat)
    reader = Client()
    reader.force_login(bob)
    assert reader.post(reverse("chat:rename", args=[chat.pk]), {"title": "pwned"}).status_code == 404
    assert reader.post(reverse("chat:delete", args=[chat.pk])).status_code == 404
    assert reader.post(reverse("organize:shares", args=[chat.pk])).status_code == 404
    assert reader.get(reverse("organize:shares", args=[chat.pk])).status_code == 404
    assert reader.post(reverse("organize:share-revoke", args=[Share.objects.get().pk])).status_code == 404
    assert Share.objects.get().revoked_at is None
    chat.refresh_from_db()
    assert chat.title == "Mine" and Share.objects.count() == 1


@pytest.mark.parametrize("token", ["x", "A" * 43, "A" * 500, "..%2F..", "%00"])
def test_unknown_tokens_are_404(client: Client, alice: User, token: str) -> None:
    assert client.get(f"/chat/shared/{token}/").status_code == 404


@pytest.mark.database
def test_active_link_cap(client: Client, alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice)
    for _ in range(services.MAX_ACTIVE_SHARES):
        services.share_create(conversation=chat)
    response = client.post(reverse("organize:shares", args=[chat.pk]))
    assert response.status_code == 400 and "revoke one first" in response.content.decode()


@pytest.mark.database
def test_owner_sees_links_to_manage(client: Client, alice: User, make_chat: MakeChat) -> None:
    chat = make_chat(alice)
    html = client.get(_create(client, chat)).content.decode()
    assert "Manage links" in html and reverse("chat:detail", args=[chat.pk]) in html
