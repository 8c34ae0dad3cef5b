"""Include the other apps' URLconfs and socket routes, tolerating an app whose module has not landed yet."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any


def has_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except ModuleNotFoundError:
        return False


def websocket_patterns(dotted: str) -> list[Any]:
    if not has_module(dotted):
        return []
    return list(importlib.import_module(dotted).websocket_urlpatterns)
