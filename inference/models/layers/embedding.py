"""Token embeddings: a dense table, or the rows an EmbeddingLookup gives (a GGUF's blocks, for fp32 models
that read their projections as blocks: a dense fp32 table is 1 GB for a 1B model)."""

from __future__ import annotations

import torch
from torch import nn

from inference.models.quantization.base import EmbeddingLookup


class TokenEmbedding(nn.Embedding):
    """nn.Embedding that skips its random init on the meta device, where the loader builds models: torch's
    meta normal_ imports its Python reference ops first, two seconds of every model load. Once given a
    lookup (`use_lookup`), it holds no dense table."""

    lookup: EmbeddingLookup | None = None

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()

    def use_lookup(self, lookup: EmbeddingLookup) -> None:
        dtype = self.weight.dtype
        self.weight = nn.Parameter(
            torch.empty(0, dtype=dtype, device=self.weight.device), requires_grad=False
        )
        self.lookup = lookup

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.lookup is not None:
            return self.lookup.rows(input).to(self.weight.dtype)
        return super().forward(input)
