"""Which decoding sequences draft, and how many tokens: the scheduler's side of n-gram speculation.

A drafted decode row computes its last token plus k draft tokens in one chunk; the engine verifies them
(inference.core.rejection_sampler) and keeps the accepted prefix plus one token from the target. Verification
processes each position's logits as the plain sampler would, which is exact only where that processing
does not depend on the tokens this step emits, so sequences with logits processors (grammars, forced tool
calls), repetition/presence/frequency penalties, or a min_tokens floor not yet reached decode without
drafts (they stay exact, just not faster). Logprobs, stop strings, logit_bias, seeds, n > 1 and every
truncation setting are exact with drafts.
"""

from __future__ import annotations

import numpy as np

from inference.core.ngram_proposer import propose_ngram
from inference.core.sequence import Sequence
from inference.speculative_config import SpeculativeConfig


def can_draft(seq: Sequence) -> bool:
    params = seq.params
    return (
        not params.logits_processors
        and not params.has_penalties
        and seq.num_output_tokens >= params.min_tokens
    )


class Drafter:
    """Proposes drafts for decoding sequences; keeps each one's tokens as a growing numpy array, since
    converting a long Python list every step would cost more than the lookup itself."""

    def __init__(self, config: SpeculativeConfig, max_model_len: int) -> None:
        self.config = config
        self.max_model_len = max_model_len
        self._tokens: dict[int, tuple[np.ndarray, int]] = {}  # seq_id -> (buffer, tokens filled)

    def draft(self, seq: Sequence, limit: int) -> list[int]:
        """Up to `limit` draft tokens for a decoding seq; fewer near max_tokens and max_model_len."""
        # Every emitted token must stay within max_tokens and max_model_len: k drafts emit up to k + 1.
        k = min(
            self.config.num_speculative_tokens,
            limit,
            seq.max_tokens - seq.num_output_tokens - 1,
            self.max_model_len - len(seq) - 1,
        )
        if k < 1 or not can_draft(seq):
            return []
        tokens = self._array(seq)
        return propose_ngram(tokens, k, self.config.prompt_lookup_min, self.config.prompt_lookup_max)

    def forget(self, seq: Sequence) -> None:
        self._tokens.pop(seq.seq_id, None)

    def _array(self, seq: Sequence) -> np.ndarray:
        """seq's tokens as int64 (token ids only ever grow by appending, so only the new ones are copied)."""
        length = len(seq.token_ids)
        buffer, filled = self._tokens.get(seq.seq_id, (np.empty(0, dtype=np.int64), 0))
        if length > buffer.size:
            grown = np.empty(max(2 * buffer.size, length + 64), dtype=np.int64)
            grown[:filled] = buffer[:filled]
            buffer = grown
        if length > filled:
            buffer[filled:length] = seq.token_ids[filled:length]
        self._tokens[seq.seq_id] = (buffer, length)
        return buffer[:length]
