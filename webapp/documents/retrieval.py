"""best_chunks: the chunks of some documents that best match a question, by full-text search.

SQLite: the FTS5 table documents_chunk_fts (porter stemming, BM25), kept in step with the chunk table by
triggers (migration 0002). PostgreSQL: to_tsvector('english', text) with a GIN index, ranked by ts_rank.
Either way the question's words are OR-ed: a passage that has some of them still counts, ranked lower.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVector
from django.db import connection
from django.db.models import F

from webapp.documents.models import DocumentChunk

MAX_TERMS = 32
_STOP = frozenset(
    [
        "a", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does",
        "for", "from", "had", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "me",
        "my", "no", "not", "of", "on", "or", "our", "so", "such", "that", "the", "their", "them",
        "then", "there", "these", "they", "this", "to", "was", "we", "were", "what", "when", "where",
        "which", "who", "why", "will", "with", "would", "you", "your", "about", "tell", "please",
        "give", "show", "explain", "say",
    ]
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    chunk: DocumentChunk
    score: float  # higher is better, comparable within one call only


def query_terms(question: str) -> list[str]:
    """The question's distinct words worth searching for (letters and digits only: safe in any syntax)."""
    terms: list[str] = []
    for word in re.findall(r"\w+", question.lower()):
        word = word.strip("_")
        if len(word) > 1 and word not in _STOP and word not in terms:
            terms.append(word)
    return terms[:MAX_TERMS]


def best_chunks(*, document_ids: list[int], question: str, limit: int) -> list[ScoredChunk]:
    """Up to `limit` chunks of these documents, best match first; [] when nothing matches."""
    terms = query_terms(question)
    if not terms or not document_ids or limit <= 0:
        return []
    if connection.vendor == "sqlite":
        return _sqlite(document_ids, terms, limit)
    if connection.vendor == "postgresql":
        return _postgres(document_ids, terms, limit)
    return _anywhere(document_ids, terms, limit)


def _sqlite(document_ids: list[int], terms: list[str], limit: int) -> list[ScoredChunk]:
    match = " OR ".join(f'"{term}"' for term in terms)
    marks = ",".join("%s" for _ in document_ids)
    sql = (
        "SELECT c.id, bm25(documents_chunk_fts) AS score FROM documents_chunk_fts "
        "JOIN documents_documentchunk c ON c.id = documents_chunk_fts.rowid "
        f"WHERE documents_chunk_fts MATCH %s AND c.document_id IN ({marks}) "
        "ORDER BY score, c.id LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [match, *document_ids, limit])
        rows = cursor.fetchall()
    chunks = DocumentChunk.objects.in_bulk([row[0] for row in rows])
    # bm25() is lower for better matches.
    return [ScoredChunk(chunks[pk], -float(score)) for pk, score in rows if pk in chunks]


def _postgres(document_ids: list[int], terms: list[str], limit: int) -> list[ScoredChunk]:
    query = SearchQuery(" | ".join(terms), search_type="raw", config="english")
    vector = SearchVector("text", config="english")
    rows = (
        DocumentChunk.objects.filter(document_id__in=document_ids)
        .annotate(search=vector, rank=SearchRank(vector, query))
        .filter(search=query)
        .order_by(F("rank").desc(), "id")[:limit]
    )
    return [ScoredChunk(row, float(row.rank)) for row in rows]


def _anywhere(document_ids: list[int], terms: list[str], limit: int) -> list[ScoredChunk]:
    """Other databases: count the terms in Python (correct, unindexed)."""
    scored = []
    for chunk in DocumentChunk.objects.filter(document_id__in=document_ids):
        text = chunk.text.lower()
        score = sum(text.count(term) for term in terms)
        if score:
            scored.append(ScoredChunk(chunk, float(score)))
    scored.sort(key=lambda s: (-s.score, s.chunk.pk))
    return scored[:limit]
