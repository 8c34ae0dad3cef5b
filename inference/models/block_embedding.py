"""Token embeddings: dense, or looked up in a GGUF's blocks for fp32 models that read their projections as
blocks.

On a CPU without AVX512-BF16 a model from a GGUF runs in fp32 (avx2_blocks.py), where a dense embedding
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
from torch import nn

from inference.models.gguf_blocks import GROUP, KQUANT_BYTES
from inference.models.q4_decode import BlockWeight, DecodeWeight, KQuantWeight

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


class TokenEmbedding(nn.Embedding):
    """nn.Embedding that skips its random init on the meta device, where the loader builds models: torch's
    meta normal_ imports its Python reference ops first, two seconds of every model load. Or, once given a
    GGUF's blocks (`use_blocks`), the rows of those (block_embedding.py) and no dense weight."""

    blocks: BlockWeight | None = None

    def reset_parameters(self) -> None:
        if not self.weight.is_meta:
            super().reset_parameters()

    def use_blocks(self, blocks: BlockWeight) -> None:
        dtype = self.weight.dtype
        self.weight = nn.Parameter(
            torch.empty(0, dtype=dtype, device=self.weight.device), requires_grad=False
        )
        self.blocks = blocks

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self.blocks is not None:
            return block_rows(self.blocks, input).to(self.weight.dtype)
        return super().forward(input)
