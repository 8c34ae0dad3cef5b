"""End to end on the real bundled embedding model (all-MiniLM-L6-v2, task embed) in this process, served
by the manager the server builds from mooncake.yaml: a passage that shares no word with the question but
its meaning is ranked first and reaches the prompt, where full-text search alone does not find it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from inference.api import EmbeddingClient, ModelManagerClient
from tests.webapp.documents.files import make_pdf
from tests.webapp.fake_engine import FakeEngine
from webapp.chat.models import Conversation
from webapp.documents import services
from webapp.documents.context import PREAMBLE
from webapp.documents.hooks import with_documents
from webapp.documents.models import ChunkEmbedding, Document
from webapp.documents.ranking import ranked_chunks
from webapp.documents.retrieval import best_chunks
from webapp.documents.semantic import embed, fit_texts, question_vector
from webapp.serving.engine import build_manager
from webapp.serving.runtime import Runtime

pytestmark = [
    pytest.mark.slow,
    pytest.mark.database,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("eager"),
]

EMBEDDER = "all-minilm-l6-v2"
TARGET = "The feline rested upon the rug."
PAGES = [
    "Quarterly revenue grew by eight percent while operating margins narrowed.",
    "Heavy showers and strong winds are expected along the coast tomorrow.",
    TARGET,
    "The central bank raised interest rates on savings accounts again.",
    "Fog will lift by noon, leaving a mild and sunny afternoon.",
]
QUESTION = "Where did the cat sleep?"


@pytest.fixture
def manager(runtime: Runtime, settings: Any) -> Iterator[ModelManagerClient]:
    """The server's manager for a yaml that lists a chat model and the bundled embedding model; only the
    embedding model is loaded (documents never wait for one)."""
    settings.MOONCAKE = {
        **settings.MOONCAKE,
        "model": {
            "models": [
                {"id": "chat", "model_id": "default"},
                {"id": EMBEDDER, "model_id": "default-embedding", "task": "embed"},
            ]
        },
    }
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = ""  # the first embedding model listed
    manager = build_manager(on_loaded=lambda engine: None)
    runtime.install_manager(manager)
    assert isinstance(manager.load(EMBEDDER), EmbeddingClient)
    yield manager
    manager.unload(EMBEDDER)
    runtime.install_manager(None)


@pytest.fixture
def document(alice: User, chat: Conversation) -> Document:
    document = services.document_upload(
        owner=alice, name="notes.pdf", data=make_pdf(PAGES), conversation=chat
    )
    document.refresh_from_db()
    assert document.state == Document.State.READY, document.error
    return document


async def test_a_passage_sharing_only_its_meaning_is_found_and_reaches_the_prompt(
    manager: ModelManagerClient, chat: Conversation, document: Document, settings: Any
) -> None:
    ids = [document.pk]
    by_words = await sync_to_async(best_chunks)(document_ids=ids, question=QUESTION, limit=5)
    assert 3 not in [s.chunk.page for s in by_words]  # full-text search alone never finds it

    query = await question_vector(conversation=chat, question=QUESTION)
    assert query is not None and query.model == EMBEDDER and len(query.vector) == 384
    assert await ChunkEmbedding.objects.filter(model=EMBEDDER).acount() == len(PAGES)
    found = await sync_to_async(ranked_chunks)(document_ids=ids, question=QUESTION, limit=5, query=query)
    assert [s.chunk.page for s in found][:1] == [3], [(s.chunk.text, s.score) for s in found]

    # Through the chat's hook, with room for about one passage: it is that one.
    engine = FakeEngine()
    block = f"[1] notes.pdf, page 3\n{TARGET}"
    settings.MOONCAKE_DOCUMENTS_CONTEXT_TOKENS = (
        sum(len(engine.tokenizer.encode(t)) for t in (PREAMBLE, block)) + 6
    )
    messages = [{"role": "user", "content": QUESTION}]
    sent = await with_documents(conversation=chat, messages=messages, engine=engine)
    assert sent[0]["role"] == "system" and TARGET in sent[0]["content"], sent[0]["content"]
    assert not any(page in sent[0]["content"] for page in PAGES if page != TARGET)


async def test_a_passage_longer_than_the_model_reads_is_cut_to_fit(manager: ModelManagerClient) -> None:
    engine = manager.peek(EMBEDDER)
    long = "The feline rested upon the rug while the rain fell outside. " * 60  # ~720 tokens
    [cut] = await asyncio.to_thread(fit_texts, EMBEDDER, [long])
    assert long.lower().startswith(cut[:40].lower())  # its beginning (the model is uncased)
    assert 200 < len(engine.tokenizer.encode(cut)) <= engine.max_model_len == 256
    [vector] = await embed(EMBEDDER, [long])
    assert len(vector) == 384
