"""An API request's sampling fields, as webapp.serving.sampling.sampling_params takes them."""

from __future__ import annotations

from typing import Any

from inference.api import LogitsProcessor, SamplingParams
from webapp.api.schemas.common import SamplingFields
from webapp.core.errors import InvalidRequest
from webapp.serving.sampling import sampling_params


def logit_bias_ids(bias: dict[str, float] | None, vocab: int) -> dict[int, float] | None:
    if not bias:
        return None
    out: dict[int, float] = {}
    for key, value in bias.items():
        token = int(key)
        if not 0 <= token < vocab:
            raise InvalidRequest(
                f"logit_bias key {key} is not a token id of this model (vocabulary {vocab}).",
                param="logit_bias",
            )
        out[token] = value
    return out


def build_params(
    fields: SamplingFields,
    *,
    max_tokens: int,
    vocab: int,
    logprobs: int | None,
    prompt_logprobs: int | None = None,
    logits_processors: list[LogitsProcessor] | None = None,
) -> SamplingParams:
    kwargs: dict[str, Any] = {
        "n": fields.n,
        "max_tokens": max_tokens,
        "min_tokens": fields.min_tokens,
        "presence_penalty": fields.presence_penalty,
        "frequency_penalty": fields.frequency_penalty,
        "stop": fields.stop_list(),
        "ignore_eos": fields.ignore_eos,
        "skip_special_tokens": fields.skip_special_tokens,
        "logprobs": logprobs,
        "prompt_logprobs": prompt_logprobs,
        "logit_bias": logit_bias_ids(fields.logit_bias, vocab),
        "seed": fields.seed,
        "logits_processors": logits_processors or [],
    }
    # Unset OpenAI fields keep the engine's defaults (OpenAI's own: temperature 1, top_p 1).
    optional = {
        "temperature": fields.temperature,
        "top_p": fields.top_p,
        "top_k": fields.top_k,
        "min_p": fields.min_p,
        "repetition_penalty": fields.repetition_penalty,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    return sampling_params(**kwargs)
