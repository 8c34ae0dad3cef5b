"""/v1/responses endpoints (OpenAI's Responses API): parse, delegate to the responses services, render.

Creating a response runs the chat pipeline (webapp.api.responses.generation_response, as chat completions
do); stored responses are read back, listed and deleted by their owner only.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from ninja import Query, Router

from webapp.api.auth import authenticate
from webapp.api.responses import generation_response
from webapp.api.schemas.responses import InputItemList, ResponseDeleted, ResponseObject, ResponsesRequest
from webapp.api.services.responses_run import (
    ENDPOINT,
    ResponsesRenderer,
    cancel_response,
    prepare_response,
    start_background,
)
from webapp.api.services.responses_store import input_item_page, stored_delete, stored_get
from webapp.api.views import BODY_ERRORS, ERRORS

router = Router()


def _json(body: dict[str, Any]) -> HttpResponse:
    return HttpResponse(json.dumps(body, ensure_ascii=False), content_type="application/json")


@router.post(
    "/v1/responses",
    response={200: ResponseObject, **BODY_ERRORS},
    tags=["responses"],
    summary="Create a model response (typed SSE events when stream is true)",
)
async def create_response(request: HttpRequest, payload: ResponsesRequest) -> HttpResponseBase:
    caller = await authenticate(request)
    prepared = await prepare_response(caller, payload)
    if payload.background:
        return _json(await start_background(caller, prepared))
    renderer = ResponsesRenderer(prepared)
    return await generation_response(
        request,
        endpoint=ENDPOINT,
        model=payload.model,
        stream=payload.stream,
        sequences=1,
        prepare=prepared.prepare,
        renderer=renderer,
        caller=caller,
        framing=renderer.frames,
    )


@router.get(
    "/v1/responses/{response_id}",
    response={200: ResponseObject, **ERRORS},
    tags=["responses"],
    summary="Retrieve a stored response",
)
async def retrieve_response(request: HttpRequest, response_id: str) -> HttpResponseBase:
    caller = await authenticate(request)
    row = await sync_to_async(stored_get)(response_id, caller.user_id)
    return _json(row.body)


@router.delete(
    "/v1/responses/{response_id}",
    response={200: ResponseDeleted, **ERRORS},
    tags=["responses"],
    summary="Delete a stored response",
)
async def delete_response(request: HttpRequest, response_id: str) -> HttpResponseBase:
    caller = await authenticate(request)
    await sync_to_async(stored_delete)(response_id, caller.user_id)
    return _json({"id": response_id, "object": "response.deleted", "deleted": True})


@router.post(
    "/v1/responses/{response_id}/cancel",
    response={200: ResponseObject, **ERRORS},
    tags=["responses"],
    summary="Cancel a background response",
)
async def cancel_response_view(request: HttpRequest, response_id: str) -> HttpResponseBase:
    caller = await authenticate(request)
    return _json(await cancel_response(caller, response_id))


@router.get(
    "/v1/responses/{response_id}/input_items",
    response={200: InputItemList, **ERRORS},
    tags=["responses"],
    summary="List a stored response's input items",
)
async def list_input_items(
    request: HttpRequest,
    response_id: str,
    limit: int = Query(20, ge=1, le=100),
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> HttpResponseBase:
    caller = await authenticate(request)
    page = await sync_to_async(input_item_page)(
        response_id, caller.user_id, limit=limit, order=order, after=after
    )
    return _json(page)
