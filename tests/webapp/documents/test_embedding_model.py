"""Which embedding model documents use: the setting, else the first configured for task embed (the
bundled one first; mooncake.yaml's, then the console's), and only while it is loaded and embeds."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from webapp.core.models import ModelRegistration
from webapp.documents.embedding_model import configured_model, first_embedding_model, loaded_model
from webapp.serving.runtime import Runtime


def not_called(*args: object) -> None:
    raise AssertionError("documents only look at what a model is; the vectors come from embed_texts")


CHAT = {"id": "chat", "model_id": "default"}
BUNDLED = {"id": "minilm", "model_id": "default-embedding", "task": "embed"}
EMBEDDING_ENGINE = SimpleNamespace(dimensions=384, truncatable=False, embed=not_called)
CHAT_ENGINE = SimpleNamespace(generate=not_called)


def listing(*entries: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {"model": {"models": list(entries)}, "engine": {"type": "native"}}


def install(runtime: Runtime, **states: str) -> None:
    """A manager serving `chat` and the named embedding models (the first one aliased `mini`)."""
    listed = [SimpleNamespace(name="chat", state="loaded", aliases=[])]
    listed += [
        SimpleNamespace(name=name, state=state, aliases=["mini"] if i == 0 else [])
        for i, (name, state) in enumerate(states.items())
    ]
    engines = {info.name: EMBEDDING_ENGINE for info in listed[1:]} | {"chat": CHAT_ENGINE}
    runtime.install_manager(SimpleNamespace(list=lambda: listed, peek=engines.__getitem__))


def test_the_bundled_embedding_model_is_preferred_then_the_first_listed() -> None:
    mine = {"id": "mine", "model_id": "/models/e5-small", "task": "embed"}
    assert first_embedding_model(listing(CHAT, mine, BUNDLED)) == "minilm"
    assert first_embedding_model(listing(CHAT, mine)) == "mine"
    assert first_embedding_model(listing(CHAT)) is None
    assert first_embedding_model({"model": {"model_id": "default-embedding", "task": "embed"}}) is not None
    # The console's come after mooncake.yaml's, but the bundled model wins wherever it is registered.
    assert first_embedding_model(listing(CHAT), console=[("c1", "/m/a"), ("c2", "/m/b")]) == "c1"
    assert first_embedding_model(listing(CHAT, mine), console=[("c1", "/m/a")]) == "mine"
    assert first_embedding_model(listing(CHAT, mine), console=[("c1", "default-embedding")]) == "c1"


@pytest.mark.django_db
@pytest.mark.database
def test_the_setting_names_the_model_or_turns_ranking_by_meaning_off(settings: Any) -> None:
    settings.MOONCAKE = listing(CHAT)
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = ""
    assert configured_model() is None
    ModelRegistration.objects.create(name="from-console", source="/models/e5", task="embed")
    ModelRegistration.objects.create(name="a-chat-model", source="/models/llm")
    assert configured_model() == "from-console"
    settings.MOONCAKE = listing(CHAT, BUNDLED)
    assert configured_model() == "minilm"
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = " other "
    assert configured_model() == "other"
    for off in ("off", "OFF", "none", "0"):
        settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = off
        assert configured_model() is None


@pytest.mark.parametrize(("state", "expected"), [("loaded", "minilm"), ("loading", None), ("failed", None)])
def test_the_model_is_used_only_while_loaded(
    runtime: Runtime, settings: Any, state: str, expected: str
) -> None:
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "mini"  # an alias
    install(runtime, minilm=state)
    assert loaded_model() == expected


def test_a_model_that_does_not_embed_is_never_used(runtime: Runtime, settings: Any) -> None:
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "chat"
    install(runtime, minilm="loaded")
    assert loaded_model() is None
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "minilm"
    assert loaded_model() == "minilm"
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = "off"
    assert loaded_model() is None


def test_no_manager_or_no_embedding_model_loaded_means_none(runtime: Runtime, settings: Any) -> None:
    settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL = ""
    assert runtime.peek_manager() is None
    assert loaded_model() is None  # never builds a manager (a Celery worker or a command has none)
    install(runtime)  # the chat model alone: nothing to look up (no query of the console's rows)
    assert loaded_model() is None
