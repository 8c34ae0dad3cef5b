"""Token embeddings: dense, or looked up in a GGUF's blocks for fp32 models that read their projections as
blocks.

On a CPU without AVX512-BF16 a model from a GGUF runs in fp32 (quantization/gguf/avx2.py), where a dense
embedding
takes vocabulary x hidden x 4 bytes: 1.05 GB for Llama 3.2 1B, more than its whole Q4_K_M file. A step only
ever needs the rows of its tokens, so the embedding keeps the file's blocks (a tied model shares them with
its head) and expands the rows asked for, to gguf-py's fp32 values: the very weights the dense embedding
would hold.
"""

from __future__ import annotations

import numpy as np
import torch
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize

from inference.models.quantization.base import EmbeddingLookup
from inference.models.quantization.gguf.formats import GROUP, KQUANT_BYTES
from inference.models.quantization.gguf.layout import BlockWeight, DecodeWeight, KQuantWeight

_KQUANT_TYPES = {GGMLQuantizationType[name].value: GGMLQuantizationType[name] for name in KQUANT_BYTES}


def block_rows(weight: BlockWeight, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` (any shape) of the matrix `weight` holds, in fp32: [*ids.shape, in_features]."""
    flat = ids.reshape(-1).long()
    if isinstance(weight, KQuantWeight):
        raw = weight.raw.index_select(0, flat).numpy()
        rows = torch.from_numpy(np.ascontiguousarray(dequantize(raw, _KQUANT_TYPES[weight.type_id])))
    else:
        rows = _dm_rows(weight, flat)
    return rows.view(*ids.shape, rows.shape[-1])


def _dm_rows(weight: DecodeWeight, ids: torch.Tensor) -> torch.Tensor:
    """Q8_0 (int8 levels) or Q4_0/Q4_1 (nibbles): d * q + m per 32, as gguf-py computes it in fp32."""
    dm = weight.dm.index_select(0, ids).float().view(len(ids), -1, 2)
    levels = weight.levels.index_select(0, ids)
    if levels.dtype == torch.int8:
        q = levels.float().view(len(ids), -1, GROUP)
    else:
        nibbles = levels.view(len(ids), -1, GROUP // 2)
        q = torch.cat([nibbles & 0x0F, nibbles >> 4], dim=-1).float()
    return (q * dm[..., :1] + dm[..., 1:]).view(len(ids), -1)


class BlockEmbedding(EmbeddingLookup):
    """An embedding table's rows looked up in a GGUF's blocks: gguf-py's fp32 values, the very weights a
    dense table would hold."""

    def __init__(self, weight: BlockWeight, *, shared: bool) -> None:
        self.weight = weight
        self.shared = shared  # a tied head's blocks: counted with the head's method

    def rows(self, ids: torch.Tensor) -> torch.Tensor:
        return block_rows(self.weight, ids)

    def nbytes(self) -> int:
        return 0 if self.shared else self.weight.nbytes()
