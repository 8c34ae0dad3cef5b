"""The AVX2 fused decode stack's check at load: a small decode step through it and through the model's own
modules, on a scratch KV cache, must give the same final hidden states bit for bit (the stack calls the
modules' very kernels in their order, fused_avx2.py). Anything else (a kernel built from other sources than
it was tested with, an ATen whose reductions changed shape) keeps the module path, with a log line."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import torch

from inference.models.layers.attention.base import BatchLayout
from inference.models.quantization.gguf.fused_avx2 import Avx2FusedDecode

logger = logging.getLogger(__name__)


def checked(stack: Avx2FusedDecode | None) -> Avx2FusedDecode | None:
    """`stack` where it agrees with the modules; None, and a warning saying why, where it does not."""
    if stack is None:
        return None
    try:
        gap = disagreement(stack)
    except (RuntimeError, ValueError) as exc:
        logger.warning(
            "Decoding rows keep the module path: the fused AVX2 decode stack failed its check (%s)", exc
        )
        return None
    if gap is not None:
        logger.warning(
            "Decoding rows keep the module path: the fused AVX2 decode stack disagrees with the modules at "
            "load (largest difference %.3g in the final hidden states)",
            gap,
        )
        return None
    return stack


@torch.inference_mode()
def disagreement(stack: Avx2FusedDecode) -> float | None:
    """None where a three-row decode step (over one and two blocks of random cached keys, a row beside the
    key another row writes) gives the stack's final hidden states equal to the modules'; else the largest
    absolute difference. The model's caches are rebound to the stack's when done."""
    model = stack.model
    block_size = int(stack.k_caches[0].shape[1])
    shape = (2, *stack.k_caches[0].shape[1:])
    generator = torch.Generator().manual_seed(0)
    scratch = [
        tuple(torch.randn(shape, generator=generator).to(k.dtype) for _ in range(2)) for k in stack.k_caches
    ]
    first, last = min(3, block_size - 1), min(7, block_size - 1)
    positions = np.array([first, block_size + min(2, block_size - 1), last], dtype=np.int64)
    tables = [[0], [0, 1], [1]]
    slots = np.array([first, block_size + min(2, block_size - 1), block_size + last], dtype=np.int64)
    ids = np.array([1, 2, 3], dtype=np.int64) % model.args.vocab_size
    backend = model.decoder_layers()[0].self_attn.attn.backend
    if backend is None:
        raise ValueError("no KV cache bound")
    originals = list(zip(stack.k_caches, stack.v_caches, strict=True))
    modules_scratch = [(k.clone(), v.clone()) for k, v in scratch]
    model.bind_kv_cache(backend, modules_scratch)
    try:
        layout = BatchLayout(
            query_lens=[1, 1, 1],
            context_lens=(positions + 1).tolist(),
            block_tables=tables,
            slot_mapping=torch.from_numpy(slots),
            block_size=block_size,
            device=torch.device("cpu"),
        )
        meta = backend.build_metadata(layout)
        modules = model(torch.from_numpy(ids), torch.from_numpy(positions), meta)
    finally:
        model.bind_kv_cache(backend, originals)
    on_scratch = replace(stack, k_caches=[k for k, _ in scratch], v_caches=[v for _, v in scratch])
    fused = on_scratch.run(ids, positions, slots, tables)
    if torch.equal(fused, modules):
        return None
    return float((fused - modules).abs().max())
