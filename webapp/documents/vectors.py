"""Chunks' vectors in the database, and the chunks nearest a question's vector.

Each vector is float32 little-endian bytes in ChunkEmbedding.vector, on every database: the search is a
numpy scan over the vectors of the documents one chat uses (at most MOONCAKE_DOCUMENTS_PER_CHAT documents
plus its attached collections), which stays small, so no vector index is needed, and SQLite and
PostgreSQL behave alike without the pgvector extension.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from django.db import IntegrityError, transaction

from webapp.documents.models import ChunkEmbedding, DocumentChunk

logger = logging.getLogger(__name__)

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Near:
    chunk_id: int
    similarity: float  # cosine, -1 to 1


def pack(vector: Sequence[float] | Vector) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def unpack(data: bytes | memoryview) -> Vector:
    return np.frombuffer(bytes(data), dtype="<f4").astype(np.float32)


def normalised(vector: Sequence[float] | Vector) -> Vector:
    """`vector` at unit length (the embedding service's already are; a fake's may not be)."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def missing(*, document_ids: list[int], model: str, limit: int) -> list[tuple[int, str]]:
    """(chunk id, text) of up to `limit` chunks of these documents with no vector from `model` yet (none,
    or one from another model), in reading order."""
    if not document_ids or limit <= 0:
        return []
    rows = (
        DocumentChunk.objects.filter(document_id__in=document_ids)
        .exclude(embedding__model=model)
        .order_by("document_id", "index")
        .values_list("id", "text")[:limit]
    )
    return list(rows)


def store(*, model: str, vectors: dict[int, Sequence[float]]) -> int:
    """Save the vectors (by chunk id) as `model`'s, replacing any other model's; chunks deleted meanwhile
    (their document re-read or removed) are skipped. Returns how many were saved."""
    if not vectors:
        return 0
    try:
        with transaction.atomic():
            alive = set(DocumentChunk.objects.filter(pk__in=list(vectors)).values_list("pk", flat=True))
            rows = [
                ChunkEmbedding(chunk_id=pk, model=model, vector=pack(normalised(vector)))
                for pk, vector in vectors.items()
                if pk in alive
            ]
            # Two replies on the same documents may embed the same chunks at once: the last write wins.
            ChunkEmbedding.objects.bulk_create(
                rows, update_conflicts=True, unique_fields=["chunk"], update_fields=["model", "vector"]
            )
    except IntegrityError:  # a chunk deleted between the check and the write: next time
        logger.info("Chunks went away while their vectors were saved; they are skipped")
        return 0
    return len(rows)


def nearest(
    *, document_ids: list[int], model: str, query: Sequence[float] | Vector, limit: int
) -> list[Near]:
    """Up to `limit` chunks of these documents that have a vector from `model`, most similar to `query`
    first (ties: the earlier chunk id)."""
    if not document_ids or limit <= 0:
        return []
    target = normalised(query)
    rows = ChunkEmbedding.objects.filter(chunk__document_id__in=document_ids, model=model).values_list(
        "chunk_id", "vector"
    )
    ids: list[int] = []
    blobs: list[bytes] = []
    width = target.size * 4
    for pk, blob in rows:
        blob = bytes(blob)
        if len(blob) == width:  # another size is from an older model of the same name: ignored
            ids.append(pk)
            blobs.append(blob)
    if not ids:
        return []
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), target.size)
    similarity = matrix @ target
    keys = np.asarray(ids)
    order = np.lexsort((keys, -similarity))[:limit]  # by similarity, then chunk id
    return [Near(int(keys[i]), float(similarity[i])) for i in order]
