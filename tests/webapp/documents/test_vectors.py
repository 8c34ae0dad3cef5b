"""Chunks' vectors in the database: the bytes, a round trip, what is missing, the nearest, the cascade."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from django.contrib.auth.models import User

from webapp.chat.models import Conversation
from webapp.documents import services
from webapp.documents.models import ChunkEmbedding, Document, DocumentChunk
from webapp.documents.vectors import missing, nearest, normalised, pack, store, unpack

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("eager")]


def test_vectors_are_float32_little_endian_bytes() -> None:
    data = pack([1.0, -0.5, 0.25])
    assert data == struct.pack("<3f", 1.0, -0.5, 0.25)
    assert unpack(data).tolist() == [1.0, -0.5, 0.25]
    assert unpack(memoryview(data)).dtype == np.float32
    assert normalised([3.0, 4.0]).tolist() == pytest.approx([0.6, 0.8])
    assert normalised([0.0, 0.0]).tolist() == [0.0, 0.0]


def _document(user: User, chat: Conversation, text: bytes, name: str = "notes.txt") -> Document:
    document = services.document_upload(owner=user, name=name, data=text, conversation=chat)
    document.refresh_from_db()
    assert document.state == Document.State.READY, document.error
    return document


def _chunk_ids(document: Document) -> list[int]:
    return list(
        DocumentChunk.objects.filter(document=document).order_by("index").values_list("pk", flat=True)
    )


@pytest.mark.database
def test_store_and_nearest_round_trip(alice: User, chat: Conversation, settings: Any) -> None:
    settings.MOONCAKE_DOCUMENTS_CHUNK_CHARS = 20
    document = _document(alice, chat, b"first part here\n\nsecond part here\n\nthird part here")
    a, b, c = _chunk_ids(document)
    assert missing(document_ids=[document.pk], model="m", limit=10) == [
        (a, "first part here"),
        (b, "second part here"),
        (c, "third part here"),
    ]
    assert store(model="m", vectors={a: [1.0, 0.0], b: [0.0, 2.0], c: [1.0, 1.0]}) == 3
    saved = ChunkEmbedding.objects.get(chunk_id=b)
    assert saved.model == "m" and unpack(saved.vector).tolist() == [0.0, 1.0]  # stored at unit length
    assert missing(document_ids=[document.pk], model="m", limit=10) == []

    found = nearest(document_ids=[document.pk], model="m", query=[0.0, 3.0], limit=2)
    assert [n.chunk_id for n in found] == [b, c]
    assert found[0].similarity == pytest.approx(1.0) and found[1].similarity == pytest.approx(0.5**0.5)
    # Another model's vectors are neither compared nor counted as done; a vector of another size is ignored.
    assert nearest(document_ids=[document.pk], model="other", query=[0.0, 1.0], limit=5) == []
    assert len(missing(document_ids=[document.pk], model="other", limit=10)) == 3
    assert nearest(document_ids=[document.pk], model="m", query=[0.0, 1.0, 0.0], limit=5) == []
    assert missing(document_ids=[document.pk], model="other", limit=1) == [(a, "first part here")]


@pytest.mark.database
def test_a_new_model_replaces_a_chunks_vector(alice: User, chat: Conversation) -> None:
    document = _document(alice, chat, b"one chunk of text")
    [pk] = _chunk_ids(document)
    store(model="old", vectors={pk: [1.0, 0.0, 0.0]})
    assert missing(document_ids=[document.pk], model="new", limit=5) == [(pk, "one chunk of text")]
    store(model="new", vectors={pk: [0.0, 1.0]})
    row = ChunkEmbedding.objects.get(chunk_id=pk)
    assert (row.model, unpack(row.vector).tolist()) == ("new", [0.0, 1.0])
    assert ChunkEmbedding.objects.count() == 1


@pytest.mark.database
def test_search_stays_within_the_given_documents(alice: User, bob: User, chat: Conversation) -> None:
    from webapp.chat import services as chat_services

    mine = _document(alice, chat, b"mine")
    theirs = _document(bob, chat_services.conversation_create(user=bob), b"theirs")
    store(model="m", vectors={_chunk_ids(mine)[0]: [1.0, 0.0], _chunk_ids(theirs)[0]: [1.0, 0.0]})
    assert [
        n.chunk_id for n in nearest(document_ids=[mine.pk], model="m", query=[1, 0], limit=5)
    ] == _chunk_ids(mine)
    assert nearest(document_ids=[], model="m", query=[1, 0], limit=5) == []
    assert missing(document_ids=[], model="m", limit=5) == []


@pytest.mark.database
def test_vectors_go_with_their_chunks(alice: User, chat: Conversation) -> None:
    document = _document(alice, chat, b"some text")
    [pk] = _chunk_ids(document)
    store(model="m", vectors={pk: [1.0]})
    # A chunk deleted before its vector is written (its document re-read or removed) is skipped.
    assert store(model="m", vectors={pk + 1000: [1.0]}) == 0
    document.delete()
    assert not ChunkEmbedding.objects.exists()
