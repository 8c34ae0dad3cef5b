"""POST /v1/embeddings: parse, validate, delegate to the embedding service, render."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from ninja import Router

from webapp.api.auth import authenticate
from webapp.api.schemas.common import ErrorResponse
from webapp.api.schemas.embeddings import EmbeddingRequest, EmbeddingResponse
from webapp.api.services.embeddings import create_embeddings
from webapp.api.services.models import naming_usable_models

ERRORS: dict[int, type[ErrorResponse]] = {
    code: ErrorResponse for code in (400, 401, 404, 413, 415, 429, 500, 503)
}

router = Router()


@router.post(
    "/v1/embeddings",
    response={200: EmbeddingResponse, **ERRORS},
    tags=["embeddings"],
    summary="Create embeddings with an embedding model (task: embed)",
)
async def embeddings(request: HttpRequest, payload: EmbeddingRequest) -> HttpResponse:
    caller = await authenticate(request)
    async with naming_usable_models(payload.model, caller.viewer):
        body = await create_embeddings(caller, payload)
    # Rendered directly: thousands of floats through the response schema would be validated again.
    return HttpResponse(json.dumps(body), content_type="application/json")
