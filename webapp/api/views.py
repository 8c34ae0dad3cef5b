"""API endpoints: parse, validate, delegate to services, render. Errors are raised as webapp.core.errors'
hierarchy and rendered as OpenAI's JSON by the API's exception handler."""

from __future__ import annotations

import asyncio

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from ninja import Router

from webapp.api.auth import authenticate
from webapp.api.responses import generation_response
from webapp.api.schemas.chat import ChatCompletionRequest, ChatCompletionResponse
from webapp.api.schemas.common import ErrorResponse
from webapp.api.schemas.completions import CompletionRequest, CompletionResponse, prompt_count
from webapp.api.schemas.models import (
    DetokenizeRequest,
    DetokenizeResponse,
    ModelCard,
    ModelList,
    TokenizeRequest,
    TokenizeResponse,
)
from webapp.api.services.chat import ChatRenderer, prepare_chat
from webapp.api.services.completions import CompletionRenderer, prepare_completion
from webapp.api.services.models import model_card, model_cards, model_not_found, naming_usable_models
from webapp.api.services.tokenize import detokenize, tokenize

ERRORS: dict[int, type[ErrorResponse]] = {code: ErrorResponse for code in (400, 401, 404, 429, 500, 503)}
# Routes with a JSON body may also answer 413 (too large) and 415 (not application/json): see urls.py.
BODY_ERRORS: dict[int, type[ErrorResponse]] = {**ERRORS, 413: ErrorResponse, 415: ErrorResponse}

router = Router()


@router.post(
    "/v1/chat/completions",
    response={200: ChatCompletionResponse, **BODY_ERRORS},
    tags=["chat"],
    summary="Create a chat completion (SSE when stream is true)",
)
async def chat_completions(request: HttpRequest, payload: ChatCompletionRequest) -> HttpResponseBase:
    return await generation_response(
        request,
        endpoint="chat.completions",
        model=payload.model,
        stream=payload.stream,
        sequences=payload.n,
        prepare=lambda engine, defaults: prepare_chat(engine, payload, defaults=defaults),
        renderer=ChatRenderer(),
    )


@router.post(
    "/v1/completions",
    response={200: CompletionResponse, **BODY_ERRORS},
    tags=["completions"],
    summary="Create a text completion (SSE when stream is true)",
)
async def completions(request: HttpRequest, payload: CompletionRequest) -> HttpResponseBase:
    return await generation_response(
        request,
        endpoint="completions",
        model=payload.model,
        stream=payload.stream,
        sequences=prompt_count(payload.prompt) * payload.n,
        prepare=lambda engine, defaults: prepare_completion(engine, payload, defaults=defaults),
        renderer=CompletionRenderer(),
    )


@router.get("/v1/models", response={200: ModelList, **ERRORS}, tags=["models"], summary="List models")
async def list_models(request: HttpRequest) -> ModelList:
    caller = await authenticate(request)
    return ModelList(data=await asyncio.to_thread(model_cards, caller.viewer))


# `path:` because a hub id (org/name) is a model id: GET /v1/models/org/name retrieves it.
@router.get(
    "/v1/models/{path:model_id}",
    response={200: ModelCard, **ERRORS},
    tags=["models"],
    summary="Retrieve a model",
)
async def retrieve_model(request: HttpRequest, model_id: str) -> ModelCard:
    caller = await authenticate(request)
    card = await asyncio.to_thread(model_card, model_id, caller.viewer)
    if card is None:
        raise await asyncio.to_thread(model_not_found, model_id, caller.viewer)
    return card


@router.post(
    "/tokenize",
    response={200: TokenizeResponse, **BODY_ERRORS},
    tags=["tokenizer"],
    summary="Tokenize a prompt or chat messages",
)
async def tokenize_view(request: HttpRequest, payload: TokenizeRequest) -> TokenizeResponse:
    caller = await authenticate(request)
    async with naming_usable_models(payload.model, caller.viewer):
        return await tokenize(caller, payload)


@router.post(
    "/detokenize",
    response={200: DetokenizeResponse, **BODY_ERRORS},
    tags=["tokenizer"],
    summary="Turn token ids back into text",
)
async def detokenize_view(request: HttpRequest, payload: DetokenizeRequest) -> DetokenizeResponse:
    caller = await authenticate(request)
    async with naming_usable_models(payload.model, caller.viewer):
        return await detokenize(caller, payload)
