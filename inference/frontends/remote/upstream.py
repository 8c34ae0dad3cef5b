"""The HTTP side of an `openai` engine: one upstream server that speaks the OpenAI API (vLLM, SGLang, TGI,
llama-server, Ollama, another Mooncake), its model list, its streamed completions and its errors.

Every failure becomes one of two engine errors: UpstreamRejectedError for the upstream's verdict on the
request itself (400, 413, 422: the client's to fix), UpstreamUnavailableError for everything else
(unreachable, timed out, 5xx, 429, or refusing our model name: an operator's or a retry's to fix), of
which UpstreamAuthError is the upstream refusing our key (401, 403): an operator's to fix, named as such.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import httpx

from inference.errors import UpstreamRejectedError, UpstreamUnavailableError
from inference.outputs import Logprob, TokenLogprobs
from inference.sampling_params import SamplingParams

# Statuses that judge the request, not the server: passed on to the client as a 400.
REJECTING_STATUSES = frozenset({400, 413, 422})
# Statuses that refuse our credentials: no retry helps until the key (ours or the upstream's) is fixed.
AUTH_STATUSES = frozenset({401, 403})
CONNECT_TIMEOUT_S = 10.0
_MAX_ERROR_CHARS = 2000


class UpstreamAuthError(UpstreamUnavailableError):
    """The upstream answered 401 or 403: it refuses the API key we send (or wants one and got none)."""


class Upstream:
    def __init__(self, base_url: str, *, api_key: str | None, timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.host = urllib.parse.urlsplit(self.base_url).netloc
        self.sends_key = bool(api_key)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = httpx.Timeout(timeout, connect=min(CONNECT_TIMEOUT_S, timeout))

    def models(self, *, timeout: float) -> list[dict[str, Any]]:
        """GET /models: the upstream's model cards (blocking; load, health polls, a first request)."""
        try:
            response = httpx.get(f"{self.base_url}/models", headers=self.headers, timeout=timeout)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if response.status_code != 200:
            raise error_for_status(response.status_code, response.content, response.headers)
        try:
            data = response.json().get("data")
        except (ValueError, AttributeError):
            data = None
        if not isinstance(data, list):
            raise UpstreamUnavailableError(f"{self.base_url}/models did not answer an OpenAI model list")
        return [card for card in data if isinstance(card, dict)]

    async def completion_events(self, body: Mapping[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """POST /completions with stream: true; each SSE event's JSON, up to `[DONE]`.

        A client per request: closing this generator (a cancelled request) closes its connection at once,
        which is how an OpenAI server learns to abort. Connection setup is small beside a generation.
        """
        try:
            async with (
                httpx.AsyncClient(timeout=self.timeout, headers=self.headers) as client,
                client.stream("POST", f"{self.base_url}/completions", json=body) as response,
            ):
                if response.status_code != 200:
                    content = await response.aread()
                    raise error_for_status(response.status_code, content, response.headers)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # blank separators, comments (": ping"), event names
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    event = _json(data)
                    if "error" in event:  # vLLM reports a failure mid-stream as an event
                        raise UpstreamUnavailableError(f"the upstream failed mid-stream: {_message(event)}")
                    yield event
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        raise UpstreamUnavailableError(f"{self.host} ended the stream without [DONE]")

    def _unreachable(self, exc: httpx.HTTPError) -> UpstreamUnavailableError:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "failed"
        return UpstreamUnavailableError(
            f"the request to {self.host} {kind}: {type(exc).__name__}: {exc} (is the server at"
            " engine.base_url up, and its key right?)"
        )


def completion_body(
    model: str, prompt: list[int], params: SamplingParams, *, index: int = 0
) -> dict[str, Any]:
    """Choice `index`'s POST /completions body (each its own seed: n requests with one seed would all
    sample the same text). Extras beyond OpenAI's set (top_k, min_p, repetition_penalty,
    min_tokens, ignore_eos, ...) go only when they differ from their neutral value, in the names vLLM,
    SGLang and llama-server accept, so a stricter server only sees them when a request asked for them."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,  # token ids: the prompt is templated and tokenized here, exactly
        "stream": True,
        "stream_options": {"include_usage": True},
        "n": 1,
        "temperature": params.temperature,
        "top_p": params.top_p,
    }
    optional: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "stop": params.stop or None,
        "seed": None if params.seed is None else params.seed + index,
        "presence_penalty": params.presence_penalty or None,
        "frequency_penalty": params.frequency_penalty or None,
        "logit_bias": {str(k): v for k, v in params.logit_bias.items()} if params.logit_bias else None,
        "logprobs": params.logprobs,
        "top_k": params.effective_top_k or None,
        "min_p": params.min_p or None,
        "repetition_penalty": params.repetition_penalty if params.repetition_penalty != 1.0 else None,
        "min_tokens": params.min_tokens or None,
        "ignore_eos": params.ignore_eos or None,
        "stop_token_ids": params.stop_token_ids or None,
        "skip_special_tokens": False if not params.skip_special_tokens else None,
    }
    body.update({key: value for key, value in optional.items() if value is not None})
    return body


def error_for_status(
    status: int, content: bytes, headers: Mapping[str, str]
) -> UpstreamRejectedError | UpstreamUnavailableError:
    payload = _json(content.decode("utf-8", "replace"))
    message = _message(payload) or content.decode("utf-8", "replace")[:_MAX_ERROR_CHARS].strip()
    if status in REJECTING_STATUSES:
        error = payload.get("error")
        param = error.get("param") if isinstance(error, dict) else None
        return UpstreamRejectedError(
            message or f"the model's server refused the request ({status})",
            status=status,
            param=param if isinstance(param, str) else None,
        )
    retry = headers.get("retry-after", "")
    kind = UpstreamAuthError if status in AUTH_STATUSES else UpstreamUnavailableError
    return kind(
        f"the upstream answered {status}: {message}",
        retry_after=float(retry) if retry.isdecimal() else None,
    )


def auth_failure(upstream: Upstream, exc: UpstreamAuthError) -> str:
    """What an operator reads when the upstream refuses us: where, which setting, and what to do."""
    if upstream.sends_key:
        refused = (
            f"{upstream.base_url} refused our API key (the one engine.api_key_env names, or engine.api_key)"
        )
        fix = "set a key it accepts"
    else:
        refused = f"{upstream.base_url} wants an API key and we sent none"
        fix = "set engine.api_key_env to the variable that holds one"
    return f"upstream authentication failed: {refused} ({exc}); {fix}"


def parse_logprobs(block: dict[str, Any]) -> list[TokenLogprobs]:
    """The legacy completions logprobs block as the engine's entries; the API names tokens by text only,
    so their ids read -1."""
    tokens = block.get("tokens") or []
    values = block.get("token_logprobs") or []
    tops = block.get("top_logprobs") or []
    entries: list[TokenLogprobs] = []
    for i, token in enumerate(tokens):
        value = values[i] if i < len(values) and isinstance(values[i], int | float) else float("-inf")
        top = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
        alternatives = [
            Logprob(-1, float(lp), str(t)) for t, lp in top.items() if isinstance(lp, int | float)
        ]
        alternatives.sort(key=lambda lp: lp.logprob, reverse=True)
        entries.append((Logprob(-1, float(value), str(token)), alternatives))
    return entries


def _json(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _message(payload: Mapping[str, Any]) -> str:
    """The error text in the shapes servers use: OpenAI's {"error": {"message"}}, TGI's {"error": str},
    FastAPI's {"detail": ...}, or a bare {"message"}."""
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error[:_MAX_ERROR_CHARS]
    if isinstance(error, Mapping):
        for key in ("message", "detail"):
            if error.get(key):
                return str(error[key])[:_MAX_ERROR_CHARS]
    return ""
