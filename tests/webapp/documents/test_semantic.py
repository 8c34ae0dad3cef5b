"""Ranking by meaning with a scripted embedding model (the real one: test_semantic_real.py): the question's
vector, chunks embedded lazily and boundedly, fusion with full-text search, and full-text search alone
whenever no embedding model is loaded or it fails. Run on SQLite and again on PostgreSQL (database marker)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from tests.webapp.documents.files import make_pdf
from webapp.chat.models import Conversation
from webapp.core.errors import InvalidRequest, Unavailable
from webapp.documents import semantic, services
from webapp.documents.context import document_context
from webapp.documents.models import ChunkEmbedding, Document
from webapp.documents.ranking import QueryVector, ranked_chunks
from webapp.documents.retrieval import best_chunks
from webapp.serving.runtime import Runtime

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager"), pytest.mark.database]

MODEL = "fake-embed"
PAGES = [
    "Quarterly revenue grew while profit margins narrowed.",
    "The feline rested upon the rug.",
    "Heavy rain and strong wind are expected tomorrow.",
]
QUESTION = "Where did the cat sleep?"  # no word in common with page 2 but its meaning
# The scripted model's meanings: words of one concept share a dimension.
CONCEPTS = [
    {"cat", "feline", "kitten"},
    {"sleep", "rested", "nap"},
    {"rug", "mat", "carpet"},
    {"revenue", "profit", "money", "margins"},
    {"rain", "wind", "weather"},
]


def meaning(text: str) -> list[float]:
    words = set(re.findall(r"\w+", text.lower()))
    return [float(len(words & concept)) for concept in CONCEPTS] + [0.01]


class WordTokenizer:
    """A word per token, [CLS]/[SEP] around: enough for fitting texts to the model's length."""

    def __init__(self) -> None:
        self.words: dict[str, int] = {}

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        ids = [self.words.setdefault(w, len(self.words) + 3) for w in text.split()]
        return [1, *ids, 2] if add_special_tokens else ids

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        names = {i: w for w, i in self.words.items()}
        return " ".join(names[i] for i in ids if i in names)


def not_called(*args: object) -> None:
    raise AssertionError("documents only look at what a model is; the vectors come from embed_texts")


def embedding_engine() -> SimpleNamespace:
    """What the manager hands back for a loaded embedding model (an EmbeddingClient to isinstance)."""
    return SimpleNamespace(
        max_model_len=12, tokenizer=WordTokenizer(), dimensions=6, truncatable=False, embed=not_called
    )


@dataclass
class EmbeddingManager:
    """The runtime's manager as documents see it: one embedding model, loaded or not."""

    state: str = "loaded"
    engine: Any = field(default_factory=lambda: embedding_engine())

    def list(self) -> list[Any]:
        return [SimpleNamespace(name=MODEL, state=self.state, aliases=["embedder"])]

    def peek(self, name: str | None = None) -> Any:
        return self.engine


@dataclass
class FakeEmbeddings:
    calls: list[list[str]] = field(default_factory=list)
    error: Exception | None = None
    refused: str = "\0"  # a text the model says is not for it

    async def __call__(self, *, model: str, texts: list[str]) -> list[list[float]]:
        assert all(len(text.split()) <= 10 for text in texts), texts  # fitted to max_model_len
        self.calls.append(texts)
        if self.error is not None:
            raise self.error
        if any(self.refused in text for text in texts):
            raise InvalidRequest("This input is not for this model.", param="input")
        return [meaning(text) for text in texts]


@pytest.fixture
def manager(runtime: Runtime, settings: Any) -> Iterator[EmbeddingManager]:
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = MODEL
    manager = EmbeddingManager()
    runtime.install_manager(manager)  # type: ignore[arg-type]
    yield manager
    runtime.install_manager(None)


@pytest.fixture
def embeddings(manager: EmbeddingManager, monkeypatch: pytest.MonkeyPatch) -> FakeEmbeddings:
    fake = FakeEmbeddings()
    monkeypatch.setattr(semantic, "embed_texts", fake)
    return fake


@pytest.fixture
def document(alice: User, chat: Conversation) -> Document:
    document = services.document_upload(
        owner=alice, name="mixed.pdf", data=make_pdf(PAGES), conversation=chat
    )
    document.refresh_from_db()
    assert document.state == Document.State.READY, document.error
    return document


def pages(found: list[Any]) -> list[int | None]:
    return [s.chunk.page for s in found]


async def test_a_passage_sharing_only_its_meaning_with_the_question_is_found(
    chat: Conversation, document: Document, embeddings: FakeEmbeddings
) -> None:
    ids = [document.pk]
    assert await sync_to_async(best_chunks)(document_ids=ids, question=QUESTION, limit=5) == []

    query = await semantic.question_vector(conversation=chat, question=QUESTION)
    assert query is not None and query.model == MODEL
    assert embeddings.calls == [PAGES, [QUESTION]]  # the chunks (missing), then the question
    found = await sync_to_async(ranked_chunks)(document_ids=ids, question=QUESTION, limit=5, query=query)
    assert pages(found) == [2]  # the unrelated pages are under the similarity floor

    # The chunks have their vectors now: the next question embeds only itself.
    await semantic.question_vector(conversation=chat, question="Is a kitten on the mat?")
    assert embeddings.calls[2:] == [["Is a kitten on the mat?"]]


async def test_both_rankings_fuse_and_the_prompt_gets_the_passage(
    chat: Conversation, document: Document, embeddings: FakeEmbeddings
) -> None:
    question = "Did the cat sleep through the rain?"  # page 3 by its word "rain"; page 2 by meaning
    query = await semantic.question_vector(conversation=chat, question=question)
    found = await sync_to_async(ranked_chunks)(
        document_ids=[document.pk], question=question, limit=5, query=query
    )
    assert set(pages(found)) == {2, 3}
    assert [s.score for s in found] == sorted((s.score for s in found), reverse=True)

    # The whole document fits: its citation is the passage closest in meaning. With room for about one
    # passage, that passage is the one that goes in.
    query = await semantic.question_vector(conversation=chat, question=QUESTION)
    whole = await sync_to_async(document_context)(
        conversation=chat, question=QUESTION, token_budget=400, count_tokens=len, query=query
    )
    assert whole.whole and [p.page for p in whole.passages] == [2]
    context = await sync_to_async(document_context)(
        conversation=chat, question=QUESTION, token_budget=300, count_tokens=len, query=query
    )
    assert not context.whole and [p.page for p in context.passages] == [2]
    assert "The feline rested upon the rug." in context.text


async def test_without_a_loaded_embedding_model_full_text_search_is_alone(
    chat: Conversation,
    document: Document,
    embeddings: FakeEmbeddings,
    manager: EmbeddingManager,
    settings: Any,
) -> None:
    manager.state = "loading"  # a reply never waits for it
    assert await semantic.question_vector(conversation=chat, question=QUESTION) is None
    manager.state = "loaded"
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "off"
    assert await semantic.question_vector(conversation=chat, question=QUESTION) is None
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "not-served"
    assert await semantic.question_vector(conversation=chat, question=QUESTION) is None
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "embedder"  # an alias names it too
    assert (await semantic.question_vector(conversation=chat, question="  ")) is None
    assert embeddings.calls == []
    assert await semantic.question_vector(conversation=chat, question=QUESTION) is not None
    ranked = await sync_to_async(ranked_chunks)(
        document_ids=[document.pk], question="revenue", limit=5, query=None
    )
    assert pages(ranked) == [1]


async def test_a_failing_embedding_model_leaves_the_question_to_full_text_search(
    chat: Conversation, document: Document, embeddings: FakeEmbeddings
) -> None:
    embeddings.error = Unavailable("The model is restarting.")
    assert await semantic.question_vector(conversation=chat, question=QUESTION) is None
    assert not await ChunkEmbedding.objects.aexists()  # filled on a later question
    embeddings.error = None
    assert await semantic.question_vector(conversation=chat, question=QUESTION) is not None
    assert await ChunkEmbedding.objects.acount() == len(PAGES)


async def test_each_question_embeds_a_bounded_number_of_chunks(
    chat: Conversation, document: Document, embeddings: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(semantic, "FILL_PER_QUESTION", 2)
    monkeypatch.setattr(semantic, "BATCH", 1)
    await semantic.question_vector(conversation=chat, question=QUESTION)
    assert embeddings.calls == [[PAGES[0]], [PAGES[1]], [QUESTION]]
    await semantic.question_vector(conversation=chat, question=QUESTION)
    assert embeddings.calls[3:] == [[PAGES[2]], [QUESTION]]
    assert await ChunkEmbedding.objects.acount() == len(PAGES)


async def test_a_change_of_model_re_embeds(
    chat: Conversation, document: Document, embeddings: FakeEmbeddings
) -> None:
    await semantic.fill(model="older-model", document_ids=[document.pk], limit=10)
    assert await ChunkEmbedding.objects.filter(model="older-model").acount() == len(PAGES)
    await semantic.question_vector(conversation=chat, question=QUESTION)
    assert await ChunkEmbedding.objects.filter(model=MODEL).acount() == len(PAGES)
    assert not await ChunkEmbedding.objects.filter(model="older-model").aexists()


def test_long_texts_are_cut_to_the_models_length(manager: EmbeddingManager) -> None:
    long = " ".join(f"w{i}" for i in range(40))
    [cut, short, empty] = semantic.fit_texts(MODEL, [long, "a few words", "   "])
    assert cut.split() == [f"w{i}" for i in range(10)]  # 12 tokens with [CLS] and [SEP]
    assert (short, empty) == ("a few words", ".")


def test_ranking_without_a_query_vector_is_full_text_search() -> None:
    assert ranked_chunks(document_ids=[], question="x", limit=5, query=QueryVector(MODEL, [1.0])) == []


async def test_a_chunk_the_model_refuses_does_not_hold_back_the_others(
    chat: Conversation, document: Document, embeddings: FakeEmbeddings
) -> None:
    embeddings.refused = "rain"
    query = await semantic.question_vector(conversation=chat, question=QUESTION)
    assert query is not None
    assert embeddings.calls == [PAGES, [PAGES[0]], [PAGES[1]], [PAGES[2]], [QUESTION]]
    assert await ChunkEmbedding.objects.acount() == len(PAGES) - 1
    found = await sync_to_async(ranked_chunks)(
        document_ids=[document.pk], question="rain", limit=5, query=query
    )
    assert pages(found) == [3, 2]  # 3 by its words (it has no vector), 2 by the cat question's vector
