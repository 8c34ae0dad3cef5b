"""What a reply's prompt gets from the chat's documents: whole short documents, or the best passages.

document_context() decides, within a token budget: when every ready document fits whole, all go in whole
(a short document needs no search); otherwise the chunks that best match the question (full-text search,
fused with similarity of meaning when an embedding model is loaded: webapp.documents.ranking) go in, best
first, as many as fit. With no match (a question such as "summarize this") the documents' opening chunks
go in instead, taking turns between documents.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import zip_longest

from webapp.chat.models import Conversation
from webapp.documents.models import Document, DocumentChunk
from webapp.documents.ranking import QueryVector, ranked_chunks
from webapp.documents.selectors import context_documents

CountTokens = Callable[[str], int]

# Search results looked at for one question (more than ever fit a prompt).
CANDIDATES = 64
# Citations shown for documents that went in whole: their passages closest to the question.
WHOLE_CITATIONS = 3
# A document far longer than the budget (in characters) is never tokenized to find out.
CHARS_PER_TOKEN_BOUND = 8

PREAMBLE = (
    "The user attached the documents below. Answer from them when they are relevant, and say which "
    "document and page you used. If they do not hold the answer, say so."
)


@dataclass(frozen=True, slots=True)
class Passage:
    """A chunk that went into the prompt, as its citation will show it."""

    document_id: int
    document_name: str
    page: int | None
    heading: str
    text: str
    whole_document: bool = False

    @classmethod
    def of(cls, chunk: DocumentChunk, name: str, *, whole: bool = False) -> Passage:
        return cls(chunk.document_id, name, chunk.page, chunk.heading, chunk.text, whole)

    @property
    def place(self) -> str:
        where = f", page {self.page}" if self.page is not None else ""
        return f"{self.document_name}{where}" + (f" ({self.heading})" if self.heading else "")


@dataclass(frozen=True, slots=True)
class DocumentContext:
    text: str = ""  # the system text to add; "" when nothing went in
    passages: list[Passage] = field(default_factory=list)  # what the reply cites
    whole: bool = False
    tokens: int = 0


def document_context(
    *,
    conversation: Conversation,
    question: str,
    token_budget: int,
    count_tokens: CountTokens,
    query: QueryVector | None = None,
) -> DocumentContext:
    """The chat's ready documents as prompt text of at most `token_budget` tokens, with its citations;
    `query` (the question's vector, webapp.documents.semantic) ranks passages by meaning too."""
    documents = list(context_documents(conversation=conversation).filter(state=Document.State.READY))
    if not documents or token_budget <= 0:
        return DocumentContext()
    names = {d.pk: d.name for d in documents}
    chunks = _chunks_by_document([d.pk for d in documents])
    search = _Search(question, query)
    whole = _whole(documents, chunks, search, token_budget, count_tokens)
    if whole is not None:
        return whole
    return _passages(names, chunks, search, token_budget, count_tokens)


@dataclass(frozen=True, slots=True)
class _Search:
    question: str
    query: QueryVector | None

    def best(self, document_ids: list[int], limit: int) -> list[DocumentChunk]:
        found = ranked_chunks(
            document_ids=document_ids, question=self.question, limit=limit, query=self.query
        )
        return [s.chunk for s in found]


def _chunks_by_document(ids: list[int]) -> dict[int, list[DocumentChunk]]:
    by_document: dict[int, list[DocumentChunk]] = {pk: [] for pk in ids}
    for chunk in DocumentChunk.objects.filter(document_id__in=ids).order_by("document_id", "index"):
        by_document[chunk.document_id].append(chunk)
    return by_document


def _whole(
    documents: list[Document],
    chunks: dict[int, list[DocumentChunk]],
    search: _Search,
    budget: int,
    count: CountTokens,
) -> DocumentContext | None:
    if sum(d.char_count for d in documents) > budget * CHARS_PER_TOKEN_BOUND:
        return None
    blocks = []
    for document in documents:
        body = "\n\n".join(_with_page(c) for c in chunks[document.pk])
        blocks.append(f"=== {document.name} (whole document) ===\n{body}")
    text = f"{PREAMBLE}\n\n" + "\n\n".join(blocks)
    tokens = count(text)
    if tokens > budget:
        return None
    names = {d.pk: d.name for d in documents}
    closest = search.best(list(names), WHOLE_CITATIONS)
    cited = closest or [c[0] for c in chunks.values() if c][:WHOLE_CITATIONS]
    passages = [Passage.of(c, names[c.document_id], whole=True) for c in cited]
    return DocumentContext(text=text, passages=passages, whole=True, tokens=tokens)


def _with_page(chunk: DocumentChunk) -> str:
    return f"[page {chunk.page}]\n{chunk.text}" if chunk.page is not None else chunk.text


def _passages(
    names: dict[int, str],
    chunks: dict[int, list[DocumentChunk]],
    search: _Search,
    budget: int,
    count: CountTokens,
) -> DocumentContext:
    ranked = search.best(list(names), CANDIDATES)
    if not ranked:
        # Nothing matched: the documents' beginnings, taking turns.
        ranked = [c for row in zip_longest(*chunks.values()) for c in row if c is not None][:CANDIDATES]
    used = count(PREAMBLE) + 2
    chosen: list[Passage] = []
    blocks: list[str] = []
    for chunk in ranked:
        passage = Passage.of(chunk, names[chunk.document_id])
        block = f"[{len(chosen) + 1}] {passage.place}\n{chunk.text}"
        tokens = count(block) + 2
        if used + tokens > budget:
            continue  # a shorter passage further down may still fit
        used += tokens
        chosen.append(passage)
        blocks.append(block)
    if not chosen:
        return DocumentContext()
    text = f"{PREAMBLE}\n\n" + "\n\n".join(blocks)
    return DocumentContext(text=text, passages=chosen, whole=False, tokens=used)
