"""Decode rows through every decoder layer in one native call (csrc/avx512/decode_layers.cpp).

At batch 1 on CPU a step is bound by reading the Q4 weights once, but through the module path another
~40% went to per-operator overhead: 30 layers x ~25 PyTorch ops, each a Python call and a dispatch
(docs/design/fused-decode.md). Where every projection of a Llama-family model reads a GGUF's blocks
(GGUFDecodeMethod: Q4_0/Q4_1, Q8_0, or K-quants with integer activations) and the model has no biases or q/k
norms, every decoding row of a step (speculative verification chunks included), max_rows per call, runs its
layer stack in C++ around the same block kernels, with the same bf16 rounding points; the head stays in
PyTorch. It stays ahead of the packed bf16 path at 64 rows too (69 vs 133 ms here). Prompt chunks, other
models and GPUs keep the module path. So each generated token is computed alike whatever else its step holds
(each block kernel gives a row the same bits at every row count). Prompt rows are too, and however their
prompt is cut into chunks: the module path's linears give each row the same bits at any row count (the blocks'
batch path, AMX tiles, quantization/amx_tiles.py, or oneDNN's AVX512-BF16 kernels), and its attention is
csrc/avx512/prompt_attention.cpp (attention/torch_backend.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import torch

from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.layers.mlp import GatedMLP
from inference.models.quantization.gguf.avx512 import KQUANT_ACTIVATIONS_OP, Avx512Kernel
from inference.models.quantization.gguf.fused_rows import block_table, in_calls
from inference.models.quantization.gguf.layout import BlockWeight, DecodeWeight, KQuantWeight
from inference.models.quantization.gguf.method import GGUFDecodeMethod

logger = logging.getLogger(__name__)

# decode_layers' kind for Q4_0/Q4_1 and Q8_0 matrices (levels with (d, m) pairs); K-quants go by ggml's id.
_DM_BLOCKS = 0
_NO_DM = torch.empty(0, dtype=torch.float16)


@dataclass(slots=True)
class FusedDecode:
    """The layer weights and caches as decode_layers takes them, gathered once the cache is bound."""

    model: DecoderForCausalLM
    kernel: Avx512Kernel
    norms: list[torch.Tensor]  # per layer (input, post-attention), then the final norm
    weights: list[torch.Tensor]  # the matrices of each layer's qkv, o, gate_up and down, in that order
    dms: list[torch.Tensor]  # (d, m) pairs of Q4/Q8_0 matrices; empty for K-quants
    kinds: list[int]
    counts: list[int]  # matrices per projection
    k_caches: list[torch.Tensor]
    v_caches: list[torch.Tensor]
    cos_sin: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def max_rows(self) -> int:
        return self.kernel.max_rows

    @classmethod
    def build(cls, model: DecoderForCausalLM) -> FusedDecode | None:
        """The fused path for `model`, or None where any layer cannot take it."""
        args = model.args
        if not model.plain_layers or model.has_sliding_window:  # (a Qwen2 config may switch one on)
            return None
        if args.qkv_bias or args.o_bias or args.mlp_bias or args.qk_norm:
            return None
        if args.hidden_size % 16 or args.intermediate_size % 16 or args.head_dim % 32 or args.head_dim > 512:
            return None  # the native loops take whole 16-lane vectors
        norms: list[torch.Tensor] = []
        weights: list[torch.Tensor] = []
        dms: list[torch.Tensor] = []
        kinds: list[int] = []
        counts: list[int] = []
        kernel: Avx512Kernel | None = None
        k_caches: list[torch.Tensor] = []
        v_caches: list[torch.Tensor] = []
        for layer in model.decoder_layers():
            attn, mlp = layer.self_attn, layer.mlp
            if not isinstance(mlp, GatedMLP):
                return None
            for norm in (layer.input_layernorm, layer.post_attention_layernorm):
                if norm.weight.dtype != torch.bfloat16 or norm.weight.device.type != "cpu":
                    return None
                norms.append(norm.weight.detach().contiguous())
            for linear in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj):
                method = linear.method
                if not isinstance(method, GGUFDecodeMethod) or not isinstance(method.kernel, Avx512Kernel):
                    return None  # the fp32 AVX2 kernels have their own stack (gguf/fused_avx2.py)
                if kernel and method.kernel != kernel:
                    return None
                kernel = method.kernel
                if not all(_fusable(part, kernel) for part in method.parts):
                    return None
                for part in method.parts:
                    if isinstance(part, KQuantWeight):
                        weights.append(part.raw)
                        dms.append(_NO_DM)
                        kinds.append(part.type_id)
                    else:
                        weights.append(part.levels)
                        dms.append(part.dm)
                        kinds.append(_DM_BLOCKS)
                counts.append(len(method.parts))
            cache = attn.attn
            if cache.k_cache.dtype != torch.bfloat16 or cache.k_cache.dim() != 4:
                # Said, since it is a setting's doing (kv_cache_dtype) and costs the stack's speed.
                logger.info(
                    "Decoding rows keep the module path: the fused decode stack needs a bfloat16 KV cache, "
                    "and this one is %s (kv_cache_dtype)",
                    str(cache.k_cache.dtype).removeprefix("torch."),
                )
                return None
            k_caches.append(cache.k_cache)
            v_caches.append(cache.v_cache)
        final = model.model.norm.weight
        embedding = model.model.embed_tokens.weight
        if kernel is None or final.dtype != torch.bfloat16 or embedding.dtype != torch.bfloat16:
            return None
        norms.append(final.detach().contiguous())
        return cls(model, kernel, norms, weights, dms, kinds, counts, k_caches, v_caches)

    @torch.inference_mode()
    def run(
        self, input_ids: np.ndarray, positions: np.ndarray, slots: np.ndarray, block_tables: list[list[int]]
    ) -> torch.Tensor:
        """The final-normed hidden states [rows, hidden] of one token per row: a decode, or one position of a
        short chunk (each row sees its sequence's context up to its own position, written earlier in the
        same layer, which makes a chunk's rows causal)."""
        model, args = self.model, self.model.args
        table = block_table(block_tables, positions, self._block_size)
        cos, sin = self._rotary_tables(int(positions.max()) + 1)
        return torch.ops.mooncake_avx512.decode_layers(
            torch.from_numpy(input_ids),
            torch.from_numpy(positions),
            model.model.embed_tokens.weight,
            cos,
            sin,
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
            args.head_dim**-0.5,
            self.kernel.amx,
            KQUANT_ACTIVATIONS_OP[self.kernel.activations],
        )

    def run_rows(
        self, input_ids: np.ndarray, positions: np.ndarray, slots: np.ndarray, block_tables: list[list[int]]
    ) -> torch.Tensor:
        """run() for any number of rows, max_rows at a time and in order. A row's sums never depend on the
        other rows of its call, so how a step is cut changes no bits; a later row of one sequence sees the
        keys an earlier call wrote."""
        return in_calls(self.run, self.max_rows, input_ids, positions, slots, block_tables)

    def _rotary_tables(self, positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        """bf16 cos/sin rows for positions 0..n-1 at least, computed as the module path computes them (the
        same element-wise ops per position) and grown by doubling."""
        if self.cos_sin is None or self.cos_sin[0].shape[0] < positions:
            size = max(positions, 2 * self.cos_sin[0].shape[0] if self.cos_sin is not None else 1024)
            cos, sin = self.model.rotary.cos_sin(torch.arange(size), torch.bfloat16)
            self.cos_sin = (cos.contiguous(), sin.contiguous())
        return self.cos_sin

    @property
    def _block_size(self) -> int:
        return int(self.k_caches[0].shape[1])


def _fusable(part: BlockWeight, kernel: Avx512Kernel) -> bool:
    """Whether decode_layers reads `part` as the module path does: Q4/Q8_0 blocks always, K-quants where
    their decoding rows take the integer kernels (bf16 activations keep the module path)."""
    if isinstance(part, DecodeWeight):
        return True
    return kernel.activations != "bf16"
