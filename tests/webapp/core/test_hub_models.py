"""Hub ids fetched with the real huggingface_hub client from tests/hub_server.py into a Hugging Face cache."""

from __future__ import annotations

import contextlib
import errno
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from inference import AsyncEngine, EngineConfig, ModelManager
from tests.hub_server import HubServer, bundled_model_repo, start_hub
from tests.inference.fakes import fake_engine
from tests.webapp.fake_engine import FakeModelManager
from webapp.api.services.models import model_cards
from webapp.core.hub_models import (
    HubDownloadError,
    HubRef,
    fetch,
    hub_engine_factory,
    parse_hub_id,
)
from webapp.core.model_names import ServedNames, names_from_source
from webapp.serving.model_access import ANONYMOUS
from webapp.serving.runtime import get_runtime

REPO = "mirror-org/SmolLM2-mirror"
GATED = "mirror-org/gated"


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = bundled_model_repo(tmp_path_factory.mktemp("bundled"))
    (folder / "pytorch_model.bin").write_bytes(b"not a pickle, but never fetched either")
    (folder / "README.md").write_text("# mirror\n")
    return folder


@pytest.fixture
def hub(bundled: Path) -> Iterator[HubServer]:
    with start_hub({REPO: bundled, GATED: bundled}, gated={GATED}) as server:
        yield server


def test_parse_hub_id(tmp_path: Path) -> None:
    assert parse_hub_id("org/name") == HubRef("org/name")
    assert parse_hub_id("org/name:v1.0") == HubRef("org/name", "v1.0")
    assert parse_hub_id("org/name/sub/model.Q4.gguf") == HubRef("org/name", "main", "sub/model.Q4.gguf")
    for not_hub in ("default", "name", "/abs/path", "./org/name", "org/name/folder", "org//x", "~/m/x"):
        assert parse_hub_id(not_hub) is None, not_hub
    (tmp_path / "org" / "name").mkdir(parents=True)
    local = str(tmp_path / "org" / "name")
    assert parse_hub_id(local) is None  # a local folder wins over a hub id
    assert names_from_source("org/name:v1") == ServedNames("org/name", ("name", "org/name:v1"))
    assert names_from_source("org/repo/model.Q4.gguf") == ServedNames("org/repo/model.Q4.gguf", ("model.Q4",))


def test_first_run_downloads_then_the_cache_serves_without_the_hub(hub: HubServer, tmp_path: Path) -> None:
    cache = tmp_path / "hf"
    progress: list[tuple[int, int | None]] = []
    folder = fetch(
        HubRef(REPO), cache_dir=cache, endpoint=hub.url, token=False,
        on_progress=lambda done, total: progress.append((done, total)),
    )  # fmt: skip
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    assert "pytorch_model.bin" not in names and "README.md" not in names  # never pickles, only what loads
    assert folder.is_relative_to(cache)
    total = progress[-1][1]
    assert total and progress[-1] == (total, total) and progress[0] == (0, total)
    assert all(done <= total for done, _ in progress)

    hub.stop()
    again = fetch(HubRef(REPO), cache_dir=cache, endpoint=hub.url, token=False)
    assert again == folder


def test_offline_mode_uses_the_cache_and_explains_a_miss(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants

    cache = tmp_path / "hf"
    folder = fetch(HubRef(REPO), cache_dir=cache, endpoint=hub.url, token=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert fetch(HubRef(REPO), cache_dir=cache, endpoint=hub.url) == folder
    with pytest.raises(HubDownloadError, match=r"not in the Hugging Face cache.*HF_HUB_OFFLINE"):
        fetch(HubRef(REPO), cache_dir=tmp_path / "empty", endpoint=hub.url)


def test_unknown_repo_and_revision_are_clear(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(HubDownloadError, match="no model repository mirror-org/missing"):
        fetch(HubRef("mirror-org/missing"), cache_dir=tmp_path, endpoint=hub.url, token=False)
    with pytest.raises(HubDownloadError, match="has no revision 'nope'"):
        fetch(HubRef(REPO, "nope"), cache_dir=tmp_path, endpoint=hub.url, token=False)


def test_gated_repo_needs_the_token(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(HubDownloadError, match=r"gated.*HF_TOKEN"):
        fetch(HubRef(GATED), cache_dir=tmp_path / "a", endpoint=hub.url, token=False)
    folder = fetch(HubRef(GATED), cache_dir=tmp_path / "b", endpoint=hub.url, token=hub.token)
    assert (folder / "model.safetensors").is_file()


def test_disk_full_is_clear(hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def full(*args: object, **kwargs: object) -> str:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", full)
    monkeypatch.setattr("webapp.core.hub_models.cached", lambda *a, **k: None)
    with pytest.raises(HubDownloadError, match="disk is full"):
        fetch(HubRef(REPO), cache_dir=tmp_path, endpoint=hub.url, token=False)


def test_the_manager_shows_the_download_and_a_failure_then_retries(tmp_path: Path) -> None:
    """The factory wrapper reports through the manager: downloading with bytes, then failed with the
    reason; the next load (the console's Load button) tries again."""
    release = threading.Event()
    seen: list[str] = []
    attempts: list[int] = []

    def fake_fetch(ref: HubRef, **kwargs: object) -> Path:
        on_progress = kwargs["on_progress"]
        assert callable(on_progress)
        on_progress(5, 10)
        release.wait(5)
        attempts.append(1)
        if len(attempts) == 1:
            raise HubDownloadError(f"no model repository {ref.repo_id} on the hub")
        on_progress(10, 10)
        return tmp_path

    def engine(config: EngineConfig) -> AsyncEngine:
        seen.append(config.model)
        assert config.model_roots is None
        return AsyncEngine(fake_engine())

    manager: ModelManager
    factory = hub_engine_factory(engine, on_progress=lambda *report: manager.report_download(*report))
    manager = ModelManager(engine_factory=factory)
    manager.register("hubbed", EngineConfig(model=REPO))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("webapp.core.hub_models.fetch", fake_fetch)
        loader = threading.Thread(target=lambda: _load_quietly(manager))
        loader.start()
        _wait_for(lambda: manager.list()[0].state == "downloading")
        info = manager.list()[0]
        assert (info.download_bytes_done, info.download_bytes_total, info.source) == (5, 10, REPO)
        release.set()
        loader.join(5)
        failed = manager.list()[0]
        assert failed.state == "failed" and "no model repository" in (failed.error or "")
        manager.load("hubbed")
    loaded = manager.list()[0]
    assert loaded.state == "loaded" and loaded.source == REPO and loaded.download_bytes_done is None
    assert seen == [str(tmp_path)]
    manager.unload("hubbed")


def _load_quietly(manager: ModelManager) -> None:
    with contextlib.suppress(HubDownloadError):  # the test reads the failure from the manager
        manager.load("hubbed")


def _wait_for(condition: object, timeout: float = 5.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_health_and_models_show_the_download(client: Client, db: None, settings: Any) -> None:
    settings.MOONCAKE_API_AUTH = "off"  # anonymous callers see the public models, as on /v1/models
    previous = get_runtime().peek_manager()
    manager = FakeModelManager()
    info = manager.register("hubbed", None)  # the fake's own record: what list() reports
    info.state = "downloading"
    info.download_bytes_done, info.download_bytes_total = 2_000_000, 8_000_000
    get_runtime().install_manager(manager)
    try:
        health = client.get("/health")
        assert health.status_code == 503
        body = health.json()
        assert body["status"] == "downloading" and "2.0 of 8.0 MB" in body["reason"]
        download = {"bytes_done": 2_000_000, "bytes_total": 8_000_000}
        expected = {"name": "hubbed", "state": "downloading", "error": None, "download": download}
        assert body["models"] == [expected]
        (card,) = model_cards(ANONYMOUS)  # what /v1/models lists
        assert card.state == "downloading" and card.download == download
    finally:
        get_runtime().install_manager(previous)
