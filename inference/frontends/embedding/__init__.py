"""Embedding models served through /v1/embeddings: a pooled encoder behind one batching thread per model."""
