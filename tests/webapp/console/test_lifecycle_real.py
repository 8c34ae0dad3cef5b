"""The real default model via the console: register twice, load, generate, evict under a budget, refuse."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from inference import ModelManager, SamplingParams
from inference.models.loader.source import default_gguf_path
from webapp.console.models import AuditLog
from webapp.console.registry import sync_manager
from webapp.core.models import EngineSettings
from webapp.serving.runtime import get_runtime

pytestmark = pytest.mark.slow

GGUF = default_gguf_path().name


def package_dir() -> Path:
    return default_gguf_path().parent  # located, never imported


@pytest.fixture
def real_manager(settings: Any, db: None) -> Iterator[ModelManager]:
    settings.MODEL_ROOTS = [package_dir()]
    previous = get_runtime().peek_manager()
    manager = ModelManager()
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().jobs.wait_all(timeout=120)
    for info in manager.list():
        manager.unload(info.name)
    get_runtime().install_manager(previous)


def info(manager: ModelManager, name: str) -> Any:
    return next(i for i in manager.list() if i.name == name)


def act(client: Client, action: str, name: str) -> None:
    response = client.post(reverse(f"console:model-{action}", args=[name]), headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "message-error" not in response.content.decode(), response.content.decode()
    get_runtime().jobs.wait_all(timeout=300)


async def first_tokens(manager: ModelManager, name: str) -> str:
    engine = manager.get(name)
    text = ""
    stream: Any = engine.generate("The capital of France is", SamplingParams(max_tokens=4, temperature=0))
    async for output in stream:
        text = output.outputs[0].text
    return text


@pytest.mark.database
def test_register_load_evict_refuse(staff_client: Client, real_manager: ModelManager) -> None:
    # A small KV cache keeps each load light on a shared CI machine.
    EngineSettings.objects.create(kv_cache_memory_bytes=8 * 2**20, max_num_seqs=4, max_num_batched_tokens=256)
    for name, dtype_alias in (("smol-a", "smol"), ("smol-b", "smol-fp32")):
        response = staff_client.post(
            reverse("console:model-register"), {"name": name, "path": GGUF, "aliases": dtype_alias}
        )
        assert response.status_code == 302
    assert {"smol-a", "smol-b"} <= {i.name for i in real_manager.list()}

    act(staff_client, "load", "smol-a")
    a = info(real_manager, "smol-a")
    assert a.state == "loaded", a.error
    assert a.architecture == "LlamaForCausalLM" and a.num_params > 100_000_000
    assert a.memory_bytes > 0 and a.kv_capacity_tokens > 0 and a.size_on_disk > 0
    assert asyncio.run(first_tokens(real_manager, "smol")).strip()
    table = staff_client.get(reverse("console:models-table")).content.decode()
    assert 'data-model="smol-a" data-state="loaded"' in table and "LlamaForCausalLM" in table

    # Room for one model only: loading the second evicts the least recently used first.
    EngineSettings.objects.update(memory_budget_bytes=int(a.memory_bytes * 1.5))
    sync_manager()
    act(staff_client, "load", "smol-b")
    assert info(real_manager, "smol-b").state == "loaded"
    assert info(real_manager, "smol-a").state == "available"
    assert info(real_manager, "smol-a").requests_served == 1

    # With eviction off the load is refused, and the table says how much is needed against available.
    EngineSettings.objects.update(evict_lru=False)
    sync_manager()
    act(staff_client, "load", "smol-a")
    refused = info(real_manager, "smol-a")
    assert refused.state == "failed" and "needs" in str(refused.error) and "available" in str(refused.error)
    assert "LRU eviction is off" in staff_client.get(reverse("console:models-table")).content.decode()
    assert info(real_manager, "smol-b").state == "loaded"

    act(staff_client, "unload", "smol-b")
    assert info(real_manager, "smol-b").state == "available"
    actions = list(AuditLog.objects.order_by("id").values_list("action", flat=True))
    assert actions == [
        "model.register",
        "model.register",
        "model.load",
        "model.load",
        "model.load",
        "model.unload",
    ]
