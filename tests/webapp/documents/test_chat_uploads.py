"""Files uploaded in chats appear under My documents, are found by its search, and are reused in other chats
by keeping them in the owner's "Chat uploads" collection."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.chat import services as chat_services
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest
from webapp.documents import selectors, services
from webapp.documents.models import Attachment, Collection, Document

pytestmark = [pytest.mark.database, pytest.mark.django_db, pytest.mark.usefixtures("eager")]


@pytest.fixture
def client_a(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def upload(owner: User, name: str, text: str, **home: object) -> Document:
    return services.document_upload(owner=owner, name=name, data=text.encode(), **home)  # type: ignore[arg-type]


def test_my_documents_lists_what_was_uploaded_in_chats(
    client_a: Client, alice: User, chat: Conversation
) -> None:
    chat_services.conversation_rename(conversation=chat, title="Trip planning")
    upload(alice, "itinerary.txt", "Day one: Lisbon.", conversation=chat)
    page = client_a.get(reverse("documents:index")).content.decode()
    assert "Uploaded in chats" in page and "Trip planning" in page and "itinerary.txt" in page
    assert f'href="{reverse("chat:detail", args=[chat.pk])}"' in page
    assert "Ready" in page  # extracted like any document


def test_another_users_uploads_are_not_listed_or_found(client_a: Client, bob: User) -> None:
    theirs = chat_services.conversation_create(user=bob)
    upload(bob, "secret.txt", "Bob's plans.", conversation=theirs)
    page = client_a.get(reverse("documents:index"), {"q": "secret"}).content.decode()
    assert "secret.txt" not in page and "Uploaded in chats" not in page
    assert "0 documents match" in page


def test_search_finds_by_name_or_text_in_collections_and_chat_uploads(
    client_a: Client, alice: User, chat: Conversation
) -> None:
    shelf = services.collection_create(owner=alice, name="Recipes")
    upload(alice, "buns.txt", "Bake the buns at 200 degrees.", collection=shelf)
    upload(alice, "notes.md", "The oven runs hot: bake lower.", conversation=chat)
    upload(alice, "other.txt", "Nothing to see.", collection=shelf)
    assert [d.name for d in selectors.document_search(user=alice, query="bake")] == ["buns.txt", "notes.md"]
    assert [d.name for d in selectors.document_search(user=alice, query="BUNS degrees")] == ["buns.txt"]
    assert selectors.document_search(user=alice, query="   ") == []
    page = client_a.get(reverse("documents:index"), {"q": "oven"}).content.decode()
    assert "1 document match" in page and "notes.md" in page and "uploaded in" in page
    assert "Clear the search" in page
    assert "2 documents match" in client_a.get(reverse("documents:index"), {"q": "bake"}).content.decode()


def test_keeping_an_upload_moves_it_to_chat_uploads_and_its_chat_still_reads_it(
    alice: User, chat: Conversation
) -> None:
    document = upload(alice, "a.txt", "alpha", conversation=chat)
    kept = services.chat_upload_keep(document=document)
    assert kept.collection is not None and kept.collection.name == services.CHAT_UPLOADS
    assert list(selectors.context_documents(conversation=chat)) == [kept]
    assert selectors.chat_uploads(user=alice) == []
    # Again: nothing changes; a second upload kept joins the same collection.
    services.chat_upload_keep(document=kept)
    services.chat_upload_keep(document=upload(alice, "b.txt", "beta", conversation=chat))
    assert Collection.objects.get(owner=alice).documents.count() == 2
    assert Attachment.objects.filter(conversation=chat).count() == 2


def test_an_upload_is_not_attached_to_its_own_chat(alice: User, chat: Conversation) -> None:
    document = upload(alice, "a.txt", "alpha", conversation=chat)
    with pytest.raises(InvalidRequest, match="was uploaded in this chat"):
        services.attach(conversation=chat, document=document)
    assert not Collection.objects.exists()


def test_an_upload_kept_for_another_chat_lists_under_chat_uploads(
    client_a: Client, alice: User, chat: Conversation
) -> None:
    document = upload(alice, "a.txt", "alpha", conversation=chat)
    other = chat_services.conversation_create(user=alice)
    client_a.post(reverse("documents:attach", args=[document.pk]), {"conversation": other.pk})
    page = client_a.get(reverse("documents:index")).content.decode()
    assert "Chat uploads" in page and "Uploaded in chats" not in page and "a.txt" in page
    assert list(selectors.context_documents(conversation=other)) == [Document.objects.get()]
