"""ranked_chunks: the passages that best answer a question, by full-text search and, when a question
vector is at hand (webapp.documents.semantic), by meaning too, the two rankings fused by reciprocal rank
fusion. A passage that shares no word with the question but its meaning is found by the vectors alone;
one both rankings place well comes first."""

from __future__ import annotations

from dataclasses import dataclass

from webapp.documents import vectors
from webapp.documents.fusion import reciprocal_rank_fusion
from webapp.documents.models import DocumentChunk
from webapp.documents.retrieval import ScoredChunk, best_chunks

# Candidates each ranking contributes before fusion (at least the number asked for).
POOL = 64
# Below this cosine a passage is unrelated to the question, whatever its rank: a question with no
# answer in the documents ("summarize this") then falls back as it does without vectors.
MIN_SIMILARITY = 0.15


@dataclass(frozen=True, slots=True)
class QueryVector:
    model: str  # the embedding model that made it; only its vectors are compared
    vector: list[float]


def ranked_chunks(
    *, document_ids: list[int], question: str, limit: int, query: QueryVector | None = None
) -> list[ScoredChunk]:
    """Up to `limit` chunks of these documents, best first ([] when nothing matches); full-text search
    alone without `query`. Scores are the fused ones, comparable within one call only."""
    if query is None or not document_ids or limit <= 0:
        return best_chunks(document_ids=document_ids, question=question, limit=limit)
    pool = max(limit, POOL)
    text = best_chunks(document_ids=document_ids, question=question, limit=pool)
    near = vectors.nearest(document_ids=document_ids, model=query.model, query=query.vector, limit=pool)
    meaning = [n.chunk_id for n in near if n.similarity >= MIN_SIMILARITY]
    fused = reciprocal_rank_fusion([[s.chunk.pk for s in text], meaning])[:limit]
    chunks = {s.chunk.pk: s.chunk for s in text}
    chunks |= DocumentChunk.objects.in_bulk([pk for pk, _ in fused if pk not in chunks])
    return [ScoredChunk(chunks[pk], score) for pk, score in fused if pk in chunks]
