"""/tokenize and /detokenize with the model's own tokenizer and chat template.

Each call counts against the caller's requests per minute (tokenizing is work too) but holds no
concurrency slot: it generates nothing.
"""

from __future__ import annotations

import asyncio

from inference.api import EngineClient
from webapp.api.auth import Caller
from webapp.api.schemas.models import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from webapp.api.services.prompts import render_chat
from webapp.core.errors import InvalidRequest
from webapp.serving.prompts import vocab_size
from webapp.serving.runtime import get_runtime


async def tokenize(caller: Caller, payload: TokenizeRequest) -> TokenizeResponse:
    service = get_runtime().generation
    async with service.admitted(caller.limit_checks, sequences=0):
        engine = await service.engine(payload.model, caller.viewer)
        tokens = await asyncio.to_thread(_tokens, engine, payload)
    return TokenizeResponse(count=len(tokens), max_model_len=int(engine.max_model_len), tokens=tokens)


def _tokens(engine: EngineClient, payload: TokenizeRequest) -> list[int]:
    if payload.messages is not None:
        return render_chat(
            engine, payload.messages, tools=payload.tools, add_generation_prompt=payload.add_generation_prompt
        )
    return list(engine.tokenizer.encode(payload.prompt or "", add_special_tokens=payload.add_special_tokens))


async def detokenize(caller: Caller, payload: DetokenizeRequest) -> DetokenizeResponse:
    service = get_runtime().generation
    async with service.admitted(caller.limit_checks, sequences=0):
        engine = await service.engine(payload.model, caller.viewer)
        vocab = vocab_size(engine)
        bad = next((t for t in payload.tokens if not 0 <= t < vocab), None)
        if bad is not None:
            raise InvalidRequest(f"Token id {bad} is out of vocabulary (size {vocab}).", param="tokens")
        text = await asyncio.to_thread(engine.tokenizer.decode, payload.tokens)
    return DetokenizeResponse(prompt=text)
