"""Work registered for a model's load runs right after it, for the default model and console loads alike."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.fake_engine import FakeEngine
from webapp.serving import runtime as core_runtime


def test_load_hooks_all_run_and_survive_a_failing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def broken(engine: Any) -> None:
        raise RuntimeError("hook broke")

    monkeypatch.setattr(core_runtime, "_load_hooks", [])
    core_runtime.register_load_hook(broken)
    core_runtime.register_load_hook(seen.append)
    core_runtime.register_load_hook(seen.append)  # registered once
    engine = FakeEngine()
    core_runtime.run_load_hooks(engine)
    assert seen == [engine]


def test_the_api_warms_its_grammar_view_of_each_loaded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    from webapp.api import apps as api_apps
    from webapp.api.services import grammar

    assert api_apps._warm_grammar in core_runtime._load_hooks
    built: list[tuple[Any, set[int] | None]] = []
    monkeypatch.setattr(grammar, "ll_tokenizer", lambda tok, eos=None: built.append((tok, eos)))
    engine = FakeEngine()
    api_apps._warm_grammar(engine)
    assert built == [(engine.tokenizer, set(engine.eos_token_ids))]


def test_setting_django_up_leaves_torch_and_transformers_unimported(tmp_path: Path) -> None:
    """Management commands (whose system checks load the URL conf), Celery workers and shells start without
    the engine's libraries (seconds each); the server imports them when it loads a model."""
    code = (
        "import sys, django; django.setup(); import webapp.urls, webapp.celery; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "webapp.settings.test", "MOONCAKE_DATA": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_load_moves_the_long_lived_heap_out_of_the_collectors_sight() -> None:
    # A full collection over a loaded model's objects held the GIL (and every stream) for ~300 ms.
    import gc

    gc.unfreeze()
    core_runtime.run_load_hooks(FakeEngine())
    try:
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
