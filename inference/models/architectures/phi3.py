"""Phi-3 (Phi3ForCausalLM): the Llama layers with LongRoPE scaling (layers/rotary.py) and fused checkpoint
tensors.

Its checkpoints already hold qkv_proj ([q; k; v] rows) and gate_up_proj ([gate; up] rows) in the order our
QKVLinear and gate-up ShardedLinear keep them, under the same names, so they load as whole tensors
(loader/weights.py). Phi-3-mini-4k's sliding window (2047) is enforced like Mistral's.
"""

from __future__ import annotations

from typing import ClassVar

from inference.models.architectures.decoder import DecoderForCausalLM


class Phi3ForCausalLM(DecoderForCausalLM):
    # LongRoPE's per-sequence factors and the window are outside the fused native decode path.
    plain_layers: ClassVar[bool] = False
