"""Turn sampler and runner tensors into the Logprob records of the public outputs."""

from __future__ import annotations

from typing import Any

import torch

from inference.core.detokenizer import decode_token
from inference.core.model_io import ScheduledChunk
from inference.core.request import Request
from inference.core.sequence import Sequence
from inference.outputs import Logprob, TokenLogprobs


class LogprobBuilder:
    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._token_text: dict[int, str] = {}

    def make(self, token_id: int, logprob: float) -> Logprob:
        return Logprob(token_id, logprob, decode_token(self._tokenizer, token_id, self._token_text))

    def sampled(self, token_id: int, chosen: float, top: list[tuple[int, float]]) -> TokenLogprobs:
        return self.make(token_id, chosen), [self.make(t, lp) for t, lp in top]

    def prompt(
        self, logits: torch.Tensor, token_ids: list[int], start: int, num_prompt_tokens: int, k: int
    ) -> list[TokenLogprobs]:
        """Logprobs of prompt tokens start+1 .. predicted by logits rows at positions start, start+1, ..."""
        count = min(logits.shape[0], num_prompt_tokens - 1 - start)
        if count <= 0:
            return []
        logprobs = torch.log_softmax(logits[:count].float(), dim=-1)
        targets = torch.tensor(token_ids[start + 1 : start + 1 + count], device=logprobs.device)
        chosen = logprobs[torch.arange(count, device=logprobs.device), targets].tolist()
        top_vals, top_ids = logprobs.topk(k, dim=-1) if k else (logprobs[:, :0], logprobs[:, :0].long())
        rows = zip(targets.tolist(), chosen, top_ids.tolist(), top_vals.tolist(), strict=True)
        return [self.sampled(t, c, list(zip(ids, vals, strict=True))) for t, c, ids, vals in rows]

    def collect_prompt(
        self, request: Request, seq: Sequence, chunk: ScheduledChunk, logits: torch.Tensor
    ) -> None:
        """Extend request's prompt logprobs from a prefill chunk's logits (one row per position)."""
        collected = request.prompt_logprobs
        # Only the first sequence carries them; recomputation after preemption revisits positions we have.
        if collected is None or seq.index != 0 or len(collected) != chunk.start + 1:
            return
        k = request.params.prompt_logprobs or 0
        collected.extend(self.prompt(logits, seq.token_ids, chunk.start, seq.num_prompt_tokens, k))
