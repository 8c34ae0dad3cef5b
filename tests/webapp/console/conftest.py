"""Console fixtures: staff and plain users; the real ModelManager over fake engines (fast, real policy)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from inference import EngineConfig, ModelManager
from tests.webapp.fake_engine import FakeEngine
from webapp.serving.runtime import get_runtime

MIB = 2**20


class SizedFakeEngine(FakeEngine):
    """A FakeEngine with the figures the real manager reads after a load."""

    def __init__(self, config: EngineConfig, memory_bytes: int = 100 * MIB) -> None:
        super().__init__(model_name=str(config.model), token_delay=0.0)
        self.config = config
        self.memory_bytes = memory_bytes
        self.kv_capacity_tokens = 4096
        self.model_details = {
            "architecture": "LlamaForCausalLM",
            "num_params": 134_515_008,
            "dtype": config.dtype if config.dtype != "auto" else "float32",
            "size_on_disk": 90 * MIB,
        }
        self.queued: list[Any] = []  # what take_unstarted hands over
        self.adopted: list[Any] = []

    # The manager's restart path (drain, then swap): a scripted fake hands over `queued` as it is.
    def stop_accepting(self) -> None:
        pass

    def take_unstarted(self) -> list[Any]:
        taken, self.queued = self.queued, []
        return taken

    def adopt(self, submission: Any) -> None:
        self.adopted.append(submission)


@pytest.fixture
def engines() -> list[SizedFakeEngine]:
    return []


@pytest.fixture
def manager(engines: list[SizedFakeEngine]) -> Iterator[ModelManager]:
    """The real ModelManager, engines faked: eviction, keep-alive and states behave as in production."""

    def factory(config: EngineConfig) -> Any:
        engine = SizedFakeEngine(config)
        engines.append(engine)
        return engine

    previous = get_runtime().peek_manager()
    manager = ModelManager(engine_factory=factory)
    manager.register("base", EngineConfig(model="default"), aliases=["default"])
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().jobs.wait_all()
    get_runtime().install_manager(previous)


@pytest.fixture
def staff(db: None) -> User:
    """The setup account: an owner (superuser), who may act on every account (test_roles has the others)."""
    return User.objects.create_user("root", password="root-password-1", is_staff=True, is_superuser=True)


@pytest.fixture
def plain(db: None) -> User:
    return User.objects.create_user("pat", password="pat-password-1")


@pytest.fixture
def staff_client(staff: User) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def model_root(tmp_path: Path, settings: Any) -> Path:
    root = tmp_path / "models"
    root.mkdir()
    settings.MODEL_ROOTS = [root]
    return root


def make_hf_dir(path: Path) -> Path:
    """A folder that passes the source check (config.json present); fake engines never read it."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}', encoding="utf-8")
    return path
