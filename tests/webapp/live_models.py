"""One real Daphne serving a models list, shared by the suites that test a list's variants: the bundled
model in float32 and bfloat16, with n-gram speculation, with async scheduling, and on transformers' own
continuous batching. Each model has its own engine, so the variants do not share state; a suite that
needs a server of its own (a start or stop under test) says so in its fixture."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveDaphne, start_live_daphne, stop_live_daphne

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
# This server holds nine models for the whole session beside the other workers' servers: each KV cache is
# sized to what its tests need (a bf16 8k context is 184 MiB; a tiny model's 128k context a few MiB), not
# the test servers' 512 MiB, which with nine engines outgrew the CI machine's RAM beside them.
BF16_KV = {"kv_cache_memory_bytes": 256 << 20}
TINY_KV = {"kv_cache_memory_bytes": 64 << 20}
# Explicit dtypes: "auto" differs by CPU, and the variants of one dtype must agree token for token.
MODELS: dict[str, list[dict[str, Any]]] = {
    "models": [
        {"id": "smol-fp32", "model_id": "default", "dtype": "float32"},
        {"id": "smol-bf16", "model_id": "default", "dtype": "bfloat16", "default": True, **BF16_KV},
        {"id": "smol-spec", "model_id": "default", "dtype": "bfloat16", "speculative": SPEC, **BF16_KV},
        {"id": "smol-async", "model_id": "default", "dtype": "bfloat16", "async_scheduling": True, **BF16_KV},
        {"id": "smol-hf", "model_id": "default", "dtype": "float32", "type": "transformers"},
        # Tiny random checkpoints of the natively served families beyond Llama and Qwen (a mixture of
        # experts with Qwen3-MoE's structure, Mistral's window, Gemma 2's soft caps and local layers,
        # Phi-3's fused projections), written into the server's model root before it starts
        # (tests/webapp/test_architectures_live.py).
        *(
            {"id": name, "model_id": f"models/{name}", "dtype": "float32", **TINY_KV}
            for name in ("tiny-moe", "tiny-mistral", "tiny-gemma2", "tiny-phi3")
        ),
        # The bundled default embedding model (tests/webapp/test_embeddings_live.py).
        {"id": "all-minilm-l6-v2", "model_id": "default-embedding", "task": "embed"},
    ]
}
# The tiny checkpoints above and their structures (tests/inference/conftest.py TINY_CONFIGS).
TINY_MODELS = {
    "tiny-moe": "qwen3-moe-chat",
    "tiny-mistral": "mistral-chat",
    "tiny-gemma2": "gemma2-chat",
    "tiny-phi3": "phi3-chat",
}
MODEL_IDS = {str(model["id"]) for model in MODELS["models"]}
ADMIN, ADMIN_PASSWORD = "list-admin", "moon-cake-42!"


def post(server: LiveDaphne, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        server.url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def sse_data(server: LiveDaphne, body: dict[str, Any], timeout: float = 120) -> list[str]:
    """The data lines of a streamed chat completion, in order ("[DONE]" last)."""
    request = urllib.request.Request(
        server.url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return [
            line.decode().removeprefix("data: ").strip() for line in response if line.startswith(b"data: ")
        ]


def wait_all_loaded(server: LiveDaphne, names: set[str], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        models = json.loads(server.get("/health")[1]).get("models", [])
        states = {m["name"]: m["state"] for m in models}
        if all(states.get(name) == "loaded" for name in names):
            return
        assert not any(states.get(name) == "failed" for name in names), f"{models}\n{server.log_tail()}"
        time.sleep(0.5)
    raise AssertionError(f"not all loaded: {server.get('/health')[1]!r}\n{server.log_tail()}")


def console_models_page(server: LiveDaphne) -> str:
    """/console/models/ as the list server's staff user sees it."""
    request = urllib.request.Request(
        server.url + "/console/models/", headers={"Cookie": f"sessionid={server.login_session(ADMIN)}"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.read().decode())


def console_row(page: str, model: str) -> str:
    row = page[page.index(f'data-model="{model}"') :]
    return row[: row.index("</tr>")]


def write_tiny_models(models: Path) -> None:
    """Each of TINY_MODELS into models/<id>, with the bundled model's tokenizer."""
    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.source import default_gguf_path
    from tests.inference.conftest import build_tiny_model_dir
    from tests.live_server import shared_cache_dir

    tokenizer_dir = ensure_converted(default_gguf_path(), shared_cache_dir())
    for name, structure in TINY_MODELS.items():
        build_tiny_model_dir(structure, models / name, tokenizer_dir)


def _in_data(model: dict[str, Any], data: Path) -> dict[str, Any]:
    """A model entry whose model_id is relative to the server's data folder, made absolute."""
    source = str(model["model_id"])
    return {**model, "model_id": str(data / source)} if source.startswith("models/") else model


@pytest.fixture(scope="session")
def models_list_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveDaphne]:
    """The session's models-list server, every model loaded, with a staff user ADMIN."""
    data = tmp_path_factory.mktemp("models-list")
    write_tiny_models(data / "models")
    config = {"model": {"models": [_in_data(m, data) for m in MODELS["models"]]}}
    # Planned against a fixed budget (it needs about 4.5 GiB), not the RAM that other test servers on this
    # machine hold at that moment: that made a model "not fit" at start now and then.
    budget = {"MOONCAKE_MEMORY_BUDGET_BYTES": str(12 << 30)}
    server = start_live_daphne(data, config=config, env=budget)
    try:
        wait_all_loaded(server, MODEL_IDS)
        server.create_user(ADMIN, ADMIN_PASSWORD, staff=True)
        yield server
    finally:
        stop_live_daphne(server)
