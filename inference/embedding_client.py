"""EmbeddingClient: what an engine serving an embedding model (task "embed") offers the web layer beside
EngineClient. Torch-free, re-exported by inference.api (web code imports it from there)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class EmbeddingClient(Protocol):
    """The capability of an engine serving an embedding model (task "embed"): what /v1/embeddings uses,
    beside EngineClient's tokenizer and max_model_len."""

    @property
    def dimensions(self) -> int:
        """The length of the vectors it returns."""
        ...

    @property
    def truncatable(self) -> bool:
        """A prefix of a vector is an embedding too (Matryoshka), so clients may ask for fewer dimensions."""
        ...

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """One vector per row of token ids, in order. Raises QueueFullError when the queue is full, and
        PromptTooLongError or ValueError for rows it cannot take; cancelling the call drops the request."""
        ...
