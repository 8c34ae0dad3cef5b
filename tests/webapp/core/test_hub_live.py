"""A hub id end to end: a real server downloads it from tests/hub_server.py into a fresh HF_HOME, then a
second server with HF_HUB_OFFLINE=1 and the hub stopped serves chat from that cache. The model is served
under the hub id it was configured with (as vLLM does), its short name an alias."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.hub_server import bundled_model_repo, start_hub
from tests.live_server import start_live_daphne, stop_live_daphne

REPO = "mirror-org/SmolLM2-mirror"
NAME = "SmolLM2-mirror"

pytestmark = pytest.mark.slow


def test_hub_id_downloads_then_serves_offline_from_the_cache(tmp_path: Path) -> None:
    hf_home = tmp_path / "hf-home"
    config = {"model": {"model_id": REPO}}
    with start_hub({REPO: bundled_model_repo(tmp_path / "repo")}) as hub:
        env = {"HF_HOME": str(hf_home), "HF_ENDPOINT": hub.url, "HF_HUB_OFFLINE": "0"}
        first = start_live_daphne(tmp_path / "first", config=config, env=env)
        try:
            status, body = first.get("/health")
            health = json.loads(body)
            assert status == 200 and health["model"] == REPO
            assert health["models"] == [{"name": REPO, "state": "loaded", "error": None}]
            models = httpx.get(first.url + "/v1/models", timeout=10).json()["data"]
            assert [(m["id"], m["state"]) for m in models] == [(REPO, "loaded")]
            assert NAME in models[0]["aliases"]
            assert "Downloading mirror-org/SmolLM2-mirror" in first.log_path.read_text()
        finally:
            stop_live_daphne(first)
        assert any(path.startswith("/cdn/") for _, path in hub.requests)  # the weights came over the wire
        endpoint = hub.url

    env = {"HF_HOME": str(hf_home), "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "1"}
    second = start_live_daphne(tmp_path / "second", config=config, env=env)
    try:
        chat = {"model": REPO, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
        reply = httpx.post(second.url + "/v1/chat/completions", json=chat, timeout=120)
        assert reply.status_code == 200, reply.text
        assert reply.json()["model"] == REPO and reply.json()["choices"][0]["message"]["content"]
        card = httpx.get(f"{second.url}/v1/models/{NAME}", timeout=10)  # the short name: an alias
        assert card.status_code == 200 and card.json()["id"] == REPO, card.text
        wrong = {**chat, "model": NAME + "x"}
        unknown = httpx.post(second.url + "/v1/chat/completions", json=wrong, timeout=10)
        assert unknown.status_code == 404 and REPO in unknown.json()["error"]["message"], unknown.text
        assert "from the Hugging Face cache" in second.log_path.read_text()
    finally:
        stop_live_daphne(second)
