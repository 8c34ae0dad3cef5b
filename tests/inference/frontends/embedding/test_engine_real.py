"""The bundled all-MiniLM-L6-v2 served by EmbeddingEngine (started as the registry starts task embed):
concurrent requests batched together equal transformers' BertModel with sentence-transformers' mean pooling
and normalisation, in fp32, within 1e-5."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import BertModel

from inference.config import EngineConfig
from inference.frontends.embedding.engine import EmbeddingEngine
from inference.frontends.registry import EngineHost, start
from tests.inference.conftest import TEST_CACHE_DIR

TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "The stock market fell sharply today."]


@pytest.fixture(scope="module")
def engine() -> Iterator[EmbeddingEngine]:
    config = EngineConfig(model="default-embedding", task="embed", cache_dir=str(TEST_CACHE_DIR))
    started = start(config, EngineHost(log_dir=Path("."), server_executable=lambda config: ""))
    assert isinstance(started, EmbeddingEngine)
    yield started
    started.shutdown()


def test_concurrent_requests_equal_transformers_with_reference_pooling(engine: EmbeddingEngine) -> None:
    ids = [engine.tokenizer.encode(text) for text in TEXTS]

    async def all_at_once() -> list[list[list[float]]]:
        return await asyncio.gather(*(engine.embed([row]) for row in ids))

    ours = torch.tensor([vectors[0] for vectors in asyncio.run(all_at_once())])
    reference = BertModel.from_pretrained(engine.model.model_dir, use_safetensors=True).eval()
    batch = engine.tokenizer(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = reference(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=1)
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=0)
    assert engine.dimensions == 384 and engine.max_model_len == 256 and not engine.truncatable
    assert engine.stats().requests_total == 3


async def test_generation_is_refused() -> None:
    from inference.errors import UnsupportedTaskError
    from inference.sampling_params import SamplingParams

    engine = object.__new__(EmbeddingEngine)
    engine.model_name = "default-embedding"
    with pytest.raises(UnsupportedTaskError):
        await anext(engine.generate("hi", SamplingParams()))
