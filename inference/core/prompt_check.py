"""The one rule a prompt must pass before any engine runs it, whatever the engine type."""

from __future__ import annotations

from inference.errors import PromptTooLongError
from inference.sampling_params import SamplingParams


def check_prompt(
    prompt_token_ids: list[int], params: SamplingParams, *, max_model_len: int, vocab_size: int | None
) -> int:
    """Raise if the prompt cannot run; returns the effective max_tokens. `vocab_size` None: the ids are
    checked where the model runs (an upstream server)."""
    if not prompt_token_ids:
        raise ValueError("the prompt is empty")
    if vocab_size is not None and not 0 <= min(prompt_token_ids) <= max(prompt_token_ids) < vocab_size:
        raise ValueError(f"prompt token ids must be in [0, {vocab_size - 1}]")
    n = len(prompt_token_ids)
    if n >= max_model_len or (params.max_tokens is not None and n + params.max_tokens > max_model_len):
        wanted = f"{n} prompt tokens" + (f" + {params.max_tokens} max_tokens" if params.max_tokens else "")
        raise PromptTooLongError(f"{wanted} exceed the model's context of {max_model_len} tokens")
    return params.max_tokens if params.max_tokens is not None else max_model_len - n
