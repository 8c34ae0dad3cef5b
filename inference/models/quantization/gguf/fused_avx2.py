"""Decode rows through every decoder layer in one native call on the AVX2 block path
(csrc/avx2/decode_layers.cpp): the fp32 counterpart of fused_layers.py.

On a CPU without AVX512-BF16 a GGUF's projections read their blocks in fp32 (avx2.py), and a single stream's
token spent about 11 ms of a 1B model outside those kernels: ~25 PyTorch operators per layer, each a Python
call and a dispatch. Where the model is a plain Llama-family decoder whose every projection reads its blocks
through the AVX2 kernels and whose attention is csrc/avx2/paged_attention.cpp, a step's decoding rows run
their whole layer stack in one call. It calls the very functions the module path's ops call, in its order
and at its rounding points, so a row's hidden state is the module path's bit for bit (the tests hold it to
that); a self-check at load compares the two and keeps the modules, with a log line, where they differ.
The embedding, rotary tables and head stay in PyTorch (one call each per step, the module path's own).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.layers.mlp import GatedMLP
from inference.models.layers.norms import RMSNorm
from inference.models.quantization.gguf.avx2 import Avx2Kernel
from inference.models.quantization.gguf.fused_rows import block_table, in_calls
from inference.models.quantization.gguf.layout import KQuantWeight
from inference.models.quantization.gguf.method import GGUFDecodeMethod

logger = logging.getLogger(__name__)

# decode_layers' kind for Q4_0/Q4_1 and Q8_0 matrices (levels with (d, m) pairs); K-quants go by ggml's id.
_DM_BLOCKS = 0
_NO_DM = torch.empty(0, dtype=torch.float16)
# Rows per call: the block kernels read each weight once per 64 activation rows. A row's bits do not depend
# on the others in its call, so cutting a step changes nothing but the number of weight passes.
MAX_ROWS = 64
_CACHE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(slots=True)
class Avx2FusedDecode:
    """The layer weights and caches as mooncake_avx2.decode_layers takes them, gathered once the cache is
    bound."""

    model: DecoderForCausalLM
    kernel: Avx2Kernel
    norms: list[torch.Tensor]  # per layer (input, post-attention), then the final norm
    weights: list[torch.Tensor]  # the matrices of each layer's qkv, o, gate_up and down, in that order
    dms: list[torch.Tensor]  # (d, m) pairs of Q4/Q8_0 matrices; empty for K-quants
    kinds: list[int]
    counts: list[int]  # matrices per projection
    k_caches: list[torch.Tensor]
    v_caches: list[torch.Tensor]
    max_rows: int = MAX_ROWS

    @classmethod
    def build(cls, model: DecoderForCausalLM) -> Avx2FusedDecode | None:
        """The fused path for `model`, or None (with the reason logged where the model is on the AVX2
        block path at all) where any layer cannot take it. Not yet self-checked: see check.py's
        `agrees_with_modules`."""
        if not isinstance(model, DecoderForCausalLM) or not _on_avx2_blocks(model):
            return None
        stack = cls._gather(model)
        if isinstance(stack, str):
            logger.info("Decoding rows keep the module path: the fused AVX2 decode stack %s", stack)
            return None
        return stack

    @classmethod
    def _gather(cls, model: DecoderForCausalLM) -> Avx2FusedDecode | str:
        """The stack, or why not (a phrase after "the fused AVX2 decode stack")."""
        args = model.args
        plain = len(model.decoder_layers()) == args.num_layers
        if not (plain and model.plain_layers) or model.has_sliding_window:
            return "takes plain Llama-family layers without sliding windows"
        if args.qkv_bias or args.o_bias or args.mlp_bias or args.qk_norm:
            return "takes no biases or q/k norms"
        if model.rotary.by_sequence_length:
            return "takes no LongRoPE (its factors depend on the sequence's length)"
        if args.head_dim % 8 or args.head_dim > 256 or args.hidden_size % 32 or args.intermediate_size % 32:
            return (
                f"needs head_dim a multiple of 8 up to 256 and hidden sizes multiples of 32 (head_dim "
                f"{args.head_dim}, hidden {args.hidden_size}, intermediate {args.intermediate_size})"
            )
        kernel: Avx2Kernel | None = None
        stack = cls(model, Avx2Kernel(), [], [], [], [], [], [], [])
        for layer in model.decoder_layers():
            attn, mlp = layer.self_attn, layer.mlp
            if not isinstance(mlp, GatedMLP) or mlp.act is not F.silu:
                return "takes SwiGLU feed-forwards only"
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                if type(norm) is not RMSNorm or norm.weight.dtype != torch.float32:
                    return "takes fp32 RMSNorm only"
                stack.norms.append(norm.weight.detach().contiguous())
            for linear in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
                method = linear.method
                if not isinstance(method, GGUFDecodeMethod) or not isinstance(method.kernel, Avx2Kernel):
                    return "needs every projection to read its GGUF blocks through the AVX2 kernels"
                if kernel is not None and method.kernel != kernel:
                    return "needs one kernel setting for every projection"
                kernel = method.kernel
                for part in method.parts:
                    if isinstance(part, KQuantWeight):
                        stack.weights.append(part.raw)
                        stack.dms.append(_NO_DM)
                        stack.kinds.append(part.type_id)
                    else:
                        stack.weights.append(part.levels)
                        stack.dms.append(part.dm)
                        stack.kinds.append(_DM_BLOCKS)
                stack.counts.append(len(method.parts))
            cache, backend = attn.attn, attn.attn.backend
            if not (getattr(backend, "native", False) and getattr(backend, "library", "") == "mooncake_avx2"):
                return "needs the modules to attend through csrc/avx2/paged_attention.cpp (attention_backend)"
            if cache.k_cache.dim() != 4 or cache.k_cache.dtype not in _CACHE_DTYPES:
                return f"needs an fp32, bf16 or fp16 KV cache, and this one is {cache.k_cache.dtype}"
            stack.k_caches.append(cache.k_cache)
            stack.v_caches.append(cache.v_cache)
        final = model.model.norm
        if kernel is None or type(final) is not RMSNorm or final.weight.dtype != torch.float32:
            return "takes fp32 RMSNorm only"
        stack.norms.append(final.weight.detach().contiguous())
        stack.kernel = kernel
        return stack

    @torch.inference_mode()
    def run(
        self, input_ids: np.ndarray, positions: np.ndarray, slots: np.ndarray, block_tables: list[list[int]]
    ) -> torch.Tensor:
        """The final-normed hidden states [rows, hidden] of one token per row: a decode, or one position of a
        speculative chunk (each row sees its sequence's keys up to its own position, those of the call's
        earlier rows included: every row's K/V is stored before any row attends, as in the module path)."""
        model, args = self.model, self.model.args
        table = block_table(block_tables, positions, int(self.k_caches[0].shape[1]))
        ids, at = torch.from_numpy(input_ids), torch.from_numpy(positions)
        hidden = model.model.embed_tokens(ids)  # the module path's own lookup and rotary rows
        cos, sin = model.rotary.cos_sin(at, torch.float32)
        return torch.ops.mooncake_avx2.decode_layers(
            hidden.contiguous(),
            at,
            cos.contiguous(),
            sin.contiguous(),
            torch.from_numpy(slots),
            torch.from_numpy(table),
            self.k_caches,
            self.v_caches,
            self.norms,
            self.weights,
            self.dms,
            self.kinds,
            self.counts,
            args.num_heads,
            args.num_kv_heads,
            args.rms_norm_eps,
            model.decoder_layers()[0].self_attn.attn.scale,
            self.kernel.wide,
        )

    def run_rows(
        self, input_ids: np.ndarray, positions: np.ndarray, slots: np.ndarray, block_tables: list[list[int]]
    ) -> torch.Tensor:
        """run() for any number of rows, max_rows at a time and in order (a later row of one sequence sees
        the keys an earlier call wrote)."""
        return in_calls(self.run, self.max_rows, input_ids, positions, slots, block_tables)


def _on_avx2_blocks(model: DecoderForCausalLM) -> bool:
    """Whether any projection reads its blocks through the AVX2 kernels: only then is a refusal news."""
    for layer in model.decoder_layers():
        method = getattr(layer.self_attn.qkv_proj, "method", None)
        if isinstance(method, GGUFDecodeMethod) and isinstance(method.kernel, Avx2Kernel):
            return True
    return False
