"""Which code computes each row of a step on a CPU: the one place the model runner asks. Why each path is
taken, and what stays invariant, is written down in docs/design/cpu-paths.md.

- Decoding rows (one new token per sequence, speculative verification chunks included) run the fused
  native layer stack (one call per step for every layer) where the model is a plain Llama-family decoder
  whose every projection reads a GGUF's blocks: through the AVX512 kernels in bf16 (gguf/fused_layers.py),
  or through the AVX2 ones in fp32 (gguf/fused_avx2.py, checked against the modules at load); elsewhere
  they run the model's modules, whose projections read their blocks (gguf/method.py) for up to the
  kernel's max_rows rows.
- A step that carries a prompt chunk runs its prompt rows through the modules with block reads off for
  small batches: a prompt's projections are then the dense copy's (AMX tiles, or oneDNN's AVX512-BF16
  kernels), or the blocks' batch path where the blocks are the only copy, at any chunk length.
- Prompt attention is csrc/avx512/prompt_attention.cpp where the AVX512 library is loaded for a bf16
  model (layers/attention), else torch's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from inference.models.quantization.gguf.fused_avx2 import Avx2FusedDecode
from inference.models.quantization.gguf.fused_avx2_check import checked
from inference.models.quantization.gguf.fused_layers import FusedDecode
from inference.models.quantization.gguf.method import blocks_for_small_batches

# Either library's layer stack: both take a step's decoding rows by run_rows, max_rows per call.
NativeDecode = FusedDecode | Avx2FusedDecode


def fused_decode(model: nn.Module, device: torch.device) -> NativeDecode | None:
    """The fused decode stack for `model` (its KV cache bound), or None where any layer cannot take it."""
    if device.type != "cpu":
        return None
    bf16 = FusedDecode.build(model)  # type: ignore[arg-type]
    return bf16 if bf16 is not None else checked(Avx2FusedDecode.build(model))  # type: ignore[arg-type]


def decoding_rows_fused(fused: NativeDecode | None, decoding: Sequence[bool]) -> bool:
    """Whether the step's decoding chunks (those flagged) go through the fused stack; its prompt chunks
    then go through the modules beside them."""
    return fused is not None and any(decoding)


@contextmanager
def module_rows(decoding: Sequence[bool]) -> Iterator[None]:
    """Within: the modules' projections read their blocks for small batches only in a decode-only step."""
    with blocks_for_small_batches(all(decoding)):
        yield
