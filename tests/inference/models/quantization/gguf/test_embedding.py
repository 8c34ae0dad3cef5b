"""block_embedding.block_rows: rows of every block type, equal to gguf-py's fp32 dequantization."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference.models.quantization.gguf.embedding import block_rows
from inference.models.quantization.gguf.layout import decode_weight
from tests.inference.models.quantization.gguf.test_avx2 import TYPES, random_blocks


@pytest.mark.parametrize("kind", TYPES)
def test_rows_are_gguf_pys_weights_bit_for_bit(kind: str) -> None:
    blocks = random_blocks(kind, 50, 512, seed=7)
    ids = torch.tensor([[49, 0, 7], [7, 7, 13]])
    rows = block_rows(decode_weight(blocks), ids)
    expected = torch.from_numpy(np.asarray(blocks.dequantize(), dtype=np.float32)).view(50, 512)[ids]
    assert rows.shape == (2, 3, 512) and rows.dtype == torch.float32
    assert torch.equal(rows, expected)
