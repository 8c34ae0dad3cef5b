"""Which embedding model ranks documents' passages by meaning, if any.

settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL names it; left empty, the first model served for task "embed"
is used: mooncake.yaml's in order, then the console's (the bundled all-MiniLM-L6-v2 before any other);
"off" leaves full-text search alone. A model is used only while it is loaded: a reply never waits for one
to load, and a chat model named by mistake is never asked for vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings

from inference.api import EmbeddingClient, ModelManagerClient
from webapp.core.engine_config import base_layers, resolve_engine
from webapp.core.model_list import listed_models
from webapp.core.models import ModelRegistration
from webapp.serving.runtime import get_runtime

logger = logging.getLogger(__name__)

# The source that means the bundled embedding model (inference's, which the web app does not import).
BUNDLED_SOURCE = "default-embedding"
OFF = frozenset({"off", "none", "false", "no", "0"})


def loaded_model() -> str | None:
    """The configured embedding model's name when it is loaded now, else None. Blocking (the manager's
    table, and the console's rows when the setting is empty): async callers run it in a thread."""
    manager = get_runtime().peek_manager()
    if manager is None:  # a Celery worker or a command: never builds one
        return None
    listed = manager.list()
    embedders = {info.name for info in listed if info.state == "loaded" and _embeds(manager, info.name)}
    if not embedders:  # most servers: no question about configuration needs asking
        return None
    name = configured_model()
    for info in listed:
        if name is not None and (name == info.name or name in info.aliases):
            return info.name if info.name in embedders else None
    logger.debug("The documents' embedding model %r is not served", name)
    return None


def configured_model() -> str | None:
    """The name the setting gives, else the first embedding model configured; None: full-text search only.
    Blocking (the console's rows)."""
    choice = str(settings.MOONCAKE_DOCUMENTS_EMBEDDING_MODEL).strip()
    if choice.lower() in OFF:
        return None
    return choice or first_embedding_model(settings.MOONCAKE, console=_console_embedders())


def first_embedding_model(
    mooncake: Mapping[str, Mapping[str, Any]], *, console: Iterable[tuple[str, str]] = ()
) -> str | None:
    """The bundled embedding model's name when it is served, else the first model with task "embed" that
    mooncake.yaml lists, else the first of `console` ((name, source) of the console's, in order); None when
    there is none."""
    found: list[tuple[str, str]] = []
    for listed in listed_models(mooncake):
        try:
            config = resolve_engine(base_layers(mooncake, listed=listed)).config
        except ValueError:  # reported where the server registers it; never ours to raise
            continue
        if config.task == "embed":
            found.append((listed.name, config.model))
    found.extend(console)
    bundled = next((name for name, source in found if source == BUNDLED_SOURCE), None)
    return bundled or (found[0][0] if found else None)


def _console_embedders() -> list[tuple[str, str]]:
    rows = ModelRegistration.objects.filter(task="embed", builtin=False).order_by("created_at", "pk")
    return [(row.name, row.source) for row in rows.only("name", "source")]


def _embeds(manager: ModelManagerClient, name: str) -> bool:
    try:
        return isinstance(manager.peek(name), EmbeddingClient)
    except Exception:  # unloaded since it was listed
        return False
