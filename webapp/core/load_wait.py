"""How long a request for a model that is still loading waits for it: `load_wait_seconds`.

A `model.models` entry's own value, else the `model` section's, else DEFAULT_LOAD_WAIT_SECONDS; a model the
console registered gets the `model` section's. Validated where the file is read (webapp.core.model_list);
webapp.serving.model_wait waits, `mooncake check` shows each model's value and its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webapp.core.model_list import find_listed
from webapp.core.sourced import Sourced

KEY = "load_wait_seconds"
# Long enough for a model that loads from local disk on a busy machine; a client that cannot wait that
# long disconnects, which ends the wait.
DEFAULT_LOAD_WAIT_SECONDS = 120.0


def load_wait(mooncake: Mapping[str, Mapping[str, Any]], name: str | None) -> Sourced:
    """The wait for the model served as `name` (None: only the `model` section's and the default apply)."""
    listed = find_listed(mooncake, name) if name else None
    if listed is not None and KEY in listed.serving:
        return Sourced(value=float(listed.serving[KEY]), source="yaml", origin=f"{listed.key}.{KEY}")
    section = mooncake.get("model", {})
    if KEY in section:
        return Sourced(value=float(section[KEY]), source="yaml", origin=f"model.{KEY}")
    return Sourced(value=DEFAULT_LOAD_WAIT_SECONDS, source="default")
