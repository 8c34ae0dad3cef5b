"""inference.api is the web layer's whole view of the engine: it loads without torch, and both the real
engine and the web tests' fake implement its EngineClient Protocol."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from inference.api import EngineClient, ModelManagerClient
from inference.frontends.local.async_engine import AsyncEngine
from inference.manager.model_manager import ModelManager
from tests.inference.fakes import fake_engine
from tests.webapp.fake_engine import FakeEngine


def _fresh_python(code: str) -> None:
    # A fresh interpreter: this one has long since imported torch.
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_importing_the_contract_loads_no_torch() -> None:
    _fresh_python(
        "import sys, inference.api\n"
        "assert 'torch' not in sys.modules, 'inference.api loaded torch'\n"
        "assert 'transformers' not in sys.modules, 'inference.api loaded transformers'\n"
    )


def test_the_package_loads_its_torch_side_only_when_asked() -> None:
    _fresh_python(
        "import sys, inference\n"
        "inference.SamplingParams, inference.EngineConfig, inference.EngineError\n"
        "assert 'torch' not in sys.modules\n"
        "assert inference.AsyncEngine.__module__ == 'inference.frontends.local.async_engine'\n"
        "assert 'torch' in sys.modules\n"
    )


@pytest.fixture
def engine() -> Iterator[AsyncEngine]:
    eng = AsyncEngine(fake_engine())
    yield eng
    eng.shutdown()


def test_async_engine_is_an_engine_client(engine: AsyncEngine) -> None:
    assert isinstance(engine, EngineClient)
    client: EngineClient = engine  # mypy checks the same structurally
    assert client.max_queue_len == engine.engine.config.max_queue_len


def test_the_web_tests_fake_is_an_engine_client() -> None:
    client: EngineClient = FakeEngine()
    assert isinstance(client, EngineClient)
    with client.expect():  # a no-op notice, as production code calls it
        pass


def test_model_manager_is_a_manager_client() -> None:
    manager: ModelManagerClient = ModelManager()  # structural: checked by mypy
    assert manager.default_name is None
