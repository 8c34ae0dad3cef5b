"""/v1/embeddings with a fake embedding model: input forms, encodings, dimensions, errors, usage, auth, and
models of the wrong task on either side."""

from __future__ import annotations

import base64
import math
import struct
from typing import Any

import pytest
from django.test import AsyncClient

from inference.errors import QueueFullError
from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.models import RequestLog
from webapp.api.services.embeddings import embed_texts
from webapp.core.errors import InvalidRequest

# Every request writes its request-log row and usage totals: queries that can differ by database.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.database]
EMBEDDER = "fake-embedder"


class FakeEmbedder(FakeEngine):
    """Vectors made from the ids, unit length: [len, first id, last id, 1] normalised."""

    def __init__(self, *, truncatable: bool = True) -> None:
        super().__init__(model_name=EMBEDDER, max_model_len=8)
        self.dimensions = 4
        self.truncatable = truncatable
        self.embedded: list[list[list[int]]] = []

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        if self.queue_full:
            raise QueueFullError("the queue is full")
        self.embedded.append(inputs)
        vectors = [[float(len(ids)), float(ids[0]), float(ids[-1]), 1.0] for ids in inputs]
        return [[x / math.sqrt(sum(y * y for y in v)) for x in v] for v in vectors]


@pytest.fixture
def embedder(manager: FakeModelManager) -> FakeEmbedder:
    engine = FakeEmbedder()
    engine.tokenizer.encode(" ".join(f"w{i}" for i in range(20)))  # ids up to 20 are in its vocabulary
    manager.register(EMBEDDER, None)
    manager.attach(EMBEDDER, engine)
    return engine


async def _embed(client: AsyncClient, **body: Any) -> Any:
    return await post_json(client, "/v1/embeddings", {"model": EMBEDDER, **body})


@pytest.mark.parametrize(
    ("given", "rows"),
    [
        ("one two three", [[1, 2, 3]]),
        (["one two", "three"], [[1, 2], [3]]),
        ([5, 6, 7], [[5, 6, 7]]),
        ([[5, 6], [7]], [[5, 6], [7]]),
    ],
)
async def test_every_input_form_gives_one_vector_per_input_and_its_usage(
    client: AsyncClient, embedder: FakeEmbedder, given: Any, rows: list[list[int]]
) -> None:
    response = await _embed(client, input=given)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["object"] == "list" and body["model"] == EMBEDDER
    assert [d["index"] for d in body["data"]] == list(range(len(rows)))
    assert all(d["object"] == "embedding" and len(d["embedding"]) == 4 for d in body["data"])
    tokens = sum(len(r) for r in rows)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    assert [len(r) for r in embedder.embedded[-1]] == [len(r) for r in rows]
    log = await RequestLog.objects.aget(endpoint="embeddings")
    assert (log.status_code, log.prompt_tokens, log.model) == (200, tokens, EMBEDDER)


async def test_base64_is_the_float32_little_endian_bytes_of_the_float_vector(
    client: AsyncClient, embedder: FakeEmbedder
) -> None:
    floats = (await _embed(client, input=["one two", "three"])).json()["data"]
    packed = (await _embed(client, input=["one two", "three"], encoding_format="base64")).json()["data"]
    for as_floats, as_base64 in zip(floats, packed, strict=True):
        raw = base64.b64decode(as_base64["embedding"])
        decoded = struct.unpack(f"<{len(raw) // 4}f", raw)
        assert decoded == pytest.approx(as_floats["embedding"], abs=1e-7)


async def test_dimensions_truncate_and_renormalise(client: AsyncClient, embedder: FakeEmbedder) -> None:
    full = (await _embed(client, input=[3, 4, 9])).json()["data"][0]["embedding"]
    short = (await _embed(client, input=[3, 4, 9], dimensions=2)).json()["data"][0]["embedding"]
    assert len(short) == 2 and math.hypot(*short) == pytest.approx(1.0)
    assert short == pytest.approx([x / math.hypot(*full[:2]) for x in full[:2]])
    error = assert_openai_error(await _embed(client, input="x", dimensions=5), 400, "invalid_request_error")
    assert error["param"] == "dimensions" and "4" in error["message"]
    embedder.truncatable = False
    error = assert_openai_error(await _embed(client, input="x", dimensions=2), 400, "invalid_request_error")
    assert error["param"] == "dimensions" and "does not support" in error["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": ""}, "input"),
        ({"input": ["fine", ""]}, "input"),
        ({"input": []}, "input"),
        ({"input": [[]]}, "input"),
        ({"input": ["x"] * 2049}, "input"),
        ({"input": [-1]}, "input"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({}, "input"),
    ],
)
async def test_bad_input_is_400_with_its_param(
    client: AsyncClient, embedder: FakeEmbedder, body: dict[str, Any], param: str
) -> None:
    error = assert_openai_error(await _embed(client, **body), 400, "invalid_request_error")
    assert error["param"] == param
    assert embedder.embedded == []


async def test_an_input_past_the_models_length_or_vocabulary_is_400_on_input(
    client: AsyncClient, embedder: FakeEmbedder
) -> None:
    error = assert_openai_error(
        await _embed(client, input=["short", "a b c d e f g h i"]), 400, "invalid_request_error"
    )
    assert error["param"] == "input" and error["code"] == "context_length_exceeded"
    assert "maximum context length is 8 tokens" in error["message"] and "input 1 has 9" in error["message"]
    error = assert_openai_error(await _embed(client, input=[10**6]), 400, "invalid_request_error")
    assert error["param"] == "input" and "vocabulary" in error["message"]
    log = await RequestLog.objects.filter(endpoint="embeddings").afirst()
    assert log is not None and log.status_code == 400


async def test_a_full_queue_is_503_with_retry_after(client: AsyncClient, embedder: FakeEmbedder) -> None:
    embedder.queue_full = True
    response = await _embed(client, input="x")
    assert_openai_error(response, 503, "unavailable_error")
    assert response.has_header("Retry-After")


async def test_models_of_the_wrong_task_are_400_naming_the_model(
    client: AsyncClient, embedder: FakeEmbedder
) -> None:
    error = assert_openai_error(
        await post_json(client, "/v1/embeddings", {"model": "fake-model", "input": "x"}),
        400,
        "invalid_request_error",
    )
    assert error["param"] == "model" and "'fake-model' does not support embeddings" in error["message"]
    for url, body in (
        ("/v1/chat/completions", {"model": EMBEDDER, "messages": USER}),
        ("/v1/completions", {"model": EMBEDDER, "prompt": "x"}),
    ):
        error = assert_openai_error(await post_json(client, url, body), 400, "invalid_request_error")
        assert error["param"] == "model" and f"'{EMBEDDER}' is an embedding model" in error["message"]


async def test_an_unknown_model_is_404(client: AsyncClient, embedder: FakeEmbedder) -> None:
    response = await post_json(client, "/v1/embeddings", {"model": "nope", "input": "x"})
    error = assert_openai_error(response, 404, "not_found_error")
    assert EMBEDDER in error["message"]  # names the models the caller may use


async def test_auth_is_required(settings: Any, embedder: FakeEmbedder, db: None) -> None:
    settings.MOONCAKE_API_AUTH = "required"
    response = await post_json(AsyncClient(), "/v1/embeddings", {"model": EMBEDDER, "input": "x"})
    assert assert_openai_error(response, 401, "authentication_error")["code"] == "invalid_api_key"
    assert embedder.embedded == []


async def test_embed_texts_serves_the_servers_own_work(embedder: FakeEmbedder) -> None:
    vectors = await embed_texts(model=EMBEDDER, texts=["one two", "three"])
    assert len(vectors) == 2 and all(math.isclose(math.hypot(*v), 1.0) for v in vectors)


async def test_embed_texts_truncates_when_asked_and_refuses_otherwise(embedder: FakeEmbedder) -> None:
    long_text = " ".join(f"w{i}" for i in range(12))  # 12 tokens, past the fake's 8
    with pytest.raises(InvalidRequest, match="maximum context length is 8"):
        await embed_texts(model=EMBEDDER, texts=[long_text])
    await embed_texts(model=EMBEDDER, texts=[long_text], truncate=True)
    ids = embedder.tokenizer.encode(long_text)
    assert embedder.embedded[-1] == [[*ids[:7], ids[-1]]]  # the first 7 tokens and the last
