"""/tokenize and /detokenize with the model's own tokenizer and chat template."""

from __future__ import annotations

import asyncio

from webapp.api.errors import invalid
from webapp.api.schemas.models import DetokenizeRequest, DetokenizeResponse, TokenizeRequest, TokenizeResponse
from webapp.api.services.engine_access import engine_for, vocab_size
from webapp.api.services.prompts import render_chat


async def tokenize(payload: TokenizeRequest) -> TokenizeResponse:
    engine = await engine_for(payload.model)

    def work() -> list[int]:
        if payload.messages is not None:
            return render_chat(
                engine,
                payload.messages,
                tools=payload.tools,
                add_generation_prompt=payload.add_generation_prompt,
            )
        return list(
            engine.tokenizer.encode(payload.prompt or "", add_special_tokens=payload.add_special_tokens)
        )

    tokens = await asyncio.to_thread(work)
    return TokenizeResponse(count=len(tokens), max_model_len=int(engine.max_model_len), tokens=tokens)


async def detokenize(payload: DetokenizeRequest) -> DetokenizeResponse:
    engine = await engine_for(payload.model)
    vocab = vocab_size(engine)
    bad = next((t for t in payload.tokens if not 0 <= t < vocab), None)
    if bad is not None:
        raise invalid(f"Token id {bad} is out of vocabulary (size {vocab}).", param="tokens")
    text = await asyncio.to_thread(engine.tokenizer.decode, payload.tokens)
    return DetokenizeResponse(prompt=text)
