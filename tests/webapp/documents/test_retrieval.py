"""Full-text retrieval (SQLite FTS5 here; PostgreSQL under the postgres marker) and the context service."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import override_settings

from tests.webapp.documents.files import make_pdf
from webapp.chat.models import Conversation
from webapp.documents import services
from webapp.documents.context import PREAMBLE, document_context
from webapp.documents.models import Document, DocumentChunk
from webapp.documents.retrieval import best_chunks, query_terms

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager")]

PAGES = [
    "Mooncakes are pastries eaten during the Mid-Autumn Festival.",
    "The filling is usually lotus seed paste or red bean paste.",
    "Salted duck egg yolks sit in the centre to symbolise the full moon.",
    "Store the cakes in a cool dry place for up to two weeks.",
]


def chars(text: str) -> int:
    return len(text)


def upload(user: User, chat: Conversation, name: str, data: bytes) -> Document:
    document = services.document_upload(owner=user, name=name, data=data, conversation=chat)
    document.refresh_from_db()
    assert document.state == Document.State.READY, document.error
    return document


def test_query_terms_drop_stop_words_and_punctuation() -> None:
    assert query_terms('What is the "filling" of a mooncake? OR NOT*') == ["filling", "mooncake"]
    assert query_terms("the a of") == []


@pytest.mark.database
def test_best_chunks_ranks_matching_pages(alice: User, chat: Conversation) -> None:
    document = upload(alice, chat, "cakes.pdf", make_pdf(PAGES))
    found = best_chunks(document_ids=[document.pk], question="Which filling paste is used?", limit=5)
    assert [s.chunk.page for s in found][:1] == [2]
    # Stemming: "stored" finds "Store".
    assert [s.chunk.page for s in best_chunks(document_ids=[document.pk], question="stored", limit=5)] == [4]
    assert best_chunks(document_ids=[document.pk], question="quantum chromodynamics", limit=5) == []


@pytest.mark.database
def test_index_follows_deletes(alice: User, chat: Conversation) -> None:
    document = upload(alice, chat, "cakes.pdf", make_pdf(PAGES))
    document.delete()
    assert not DocumentChunk.objects.exists()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM documents_chunk_fts WHERE documents_chunk_fts MATCH 'lotus'")
            assert cursor.fetchone()[0] == 0


@pytest.mark.database
def test_search_is_limited_to_the_given_documents(alice: User, bob: User, chat: Conversation) -> None:
    from webapp.chat import services as chat_services

    mine = upload(alice, chat, "cakes.pdf", make_pdf(PAGES))
    theirs = upload(bob, chat_services.conversation_create(user=bob), "b.txt", b"lotus lotus lotus lotus")
    found = best_chunks(document_ids=[mine.pk], question="lotus", limit=10)
    assert {s.chunk.document_id for s in found} == {mine.pk}
    assert theirs.pk not in {s.chunk.document_id for s in found}


@pytest.mark.database
@pytest.mark.postgres
def test_postgres_full_text_search(alice: User, chat: Conversation) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: run with MOONCAKE_TEST_DATABASE=postgres (make test does)")
    document = upload(alice, chat, "cakes.pdf", make_pdf(PAGES))
    found = best_chunks(document_ids=[document.pk], question="What filling pastes?", limit=5)
    assert found[0].chunk.page == 2
    assert [s.chunk.page for s in best_chunks(document_ids=[document.pk], question="stored", limit=5)] == [4]
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'documents_chunk_tsv'")
        assert "gin" in cursor.fetchone()[0].lower()


@pytest.mark.database
def test_short_documents_go_in_whole(alice: User, chat: Conversation) -> None:
    upload(alice, chat, "cakes.pdf", make_pdf(PAGES))
    upload(alice, chat, "notes.md", b"# Notes\nBuy more lotus paste.")
    context = document_context(
        conversation=chat, question="lotus paste", token_budget=2000, count_tokens=chars
    )
    assert context.whole and context.text.startswith(PREAMBLE)
    assert "=== cakes.pdf (whole document) ===" in context.text and "=== notes.md" in context.text
    assert all(page in context.text for page in PAGES)
    assert "[page 3]" in context.text
    assert context.tokens <= 2000
    cited = {(p.document_name, p.page) for p in context.passages}
    assert ("cakes.pdf", 2) in cited and all(p.whole_document for p in context.passages)


@pytest.mark.database
@override_settings(MOONCAKE_DOCUMENTS_CHUNK_CHARS=200)
def test_long_documents_give_the_best_chunks_within_the_budget(alice: User, chat: Conversation) -> None:
    filler = [f"Chapter {i} talks about weather and rain in the valley." * 3 for i in range(30)]
    pages = [*filler[:20], "The secret ingredient of the recipe is cardamom.", *filler[20:]]
    upload(alice, chat, "book.pdf", make_pdf(pages))
    budget = 600
    context = document_context(
        conversation=chat, question="What is the secret ingredient?", token_budget=budget, count_tokens=chars
    )
    assert not context.whole
    assert context.passages[0].page == 21 and "cardamom" in context.passages[0].text
    assert len(context.text) <= budget
    assert context.text.startswith(PREAMBLE) and "[1] book.pdf, page 21" in context.text


@pytest.mark.database
@override_settings(MOONCAKE_DOCUMENTS_CHUNK_CHARS=200)
def test_no_match_falls_back_to_the_beginnings(alice: User, chat: Conversation) -> None:
    upload(alice, chat, "a.txt", ("alpha words here. " * 60).encode())
    upload(alice, chat, "b.txt", ("beta words here. " * 60).encode())
    context = document_context(conversation=chat, question="summarize", token_budget=800, count_tokens=chars)
    assert not context.whole
    assert [p.document_name for p in context.passages[:2]] == ["a.txt", "b.txt"]


@pytest.mark.database
def test_no_budget_or_no_ready_documents_means_no_context(alice: User, chat: Conversation) -> None:
    assert document_context(conversation=chat, question="x", token_budget=500, count_tokens=chars).text == ""
    upload(alice, chat, "a.txt", b"some words")
    assert document_context(conversation=chat, question="x", token_budget=0, count_tokens=chars).text == ""
    Document.objects.update(state=Document.State.FAILED)
    assert document_context(conversation=chat, question="x", token_budget=500, count_tokens=chars).text == ""


@pytest.mark.database
def test_attached_collections_are_read_but_never_another_users(
    alice: User, bob: User, chat: Conversation
) -> None:
    shelf = services.collection_create(owner=alice, name="Shelf")
    services.document_upload(owner=alice, name="shelf.txt", data=b"cinnamon rolls", collection=shelf)
    services.attach(conversation=chat, collection=shelf)
    context = document_context(conversation=chat, question="cinnamon", token_budget=500, count_tokens=chars)
    assert "cinnamon rolls" in context.text
    theirs = services.collection_create(owner=bob, name="Theirs")
    with pytest.raises(Exception, match="your own"):
        services.attach(conversation=chat, collection=theirs)
