"""Every position's logits of one prompt through the whole model runner (paged KV, our attention), for tests
that compare two loads of one model."""

from __future__ import annotations

import torch

from inference.core.model_io import ScheduledChunk
from inference.core.model_runner import ModelRunner
from inference.models.loader.load import LoadedModel

# A 70-token prompt of ids every tiny test vocabulary (512) has.
IDS = torch.randint(3, 512, (70,), generator=torch.Generator().manual_seed(3)).tolist()


def logits(loaded: LoadedModel, ids: list[int]) -> torch.Tensor:
    runner = ModelRunner(
        loaded,
        block_size=16,
        max_num_seqs=2,
        max_num_batched_tokens=256,
        max_model_len=None,
        kv_cache_memory_bytes=4 << 20,
        gpu_memory_utilization=0.9,
    )
    blocks = list(range(-(-len(ids) // 16)))
    out = runner.execute([ScheduledChunk(ids, 0, len(ids), blocks, return_all_logits=True)])
    return out.all_positions[0].float()
