"""Mistral: the Llama layers, with a sliding window on every layer where the config sets one (v0.1's 4096).

The window is enforced in the paged attention (PagedAttention.sliding_window, from
DecoderForCausalLM.sliding_windows), so the context is the model's whole max_position_embeddings.
"""

from __future__ import annotations

from typing import ClassVar

from inference.models.architectures.decoder import DecoderForCausalLM


class MistralForCausalLM(DecoderForCausalLM):
    # The fused native decode path attends over the whole context: windowed layers stay on the modules.
    plain_layers: ClassVar[bool] = False
