"""Who may use which model.

An unrestricted model is public; a restricted one (ModelRegistration.restricted) is for the members of
its allowed groups, and for admins only when it has none (its last group was deleted). Staff (admins and
owners) may use every model: they run them. Anyone else who names a model they may not use gets the same
404 as for a model that does not exist, so a restricted model's name is never revealed. An API key acts
with its user's access; anonymous callers (API auth off) see public models only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import Group, User

from inference.api import ModelInfo, ModelManagerClient
from webapp.core.errors import NotFound
from webapp.core.models import ModelRegistration


@dataclass(frozen=True, slots=True)
class Viewer:
    user_id: int | None
    staff: bool = False
    group_ids: frozenset[int] = frozenset()


ANONYMOUS = Viewer(user_id=None)


def viewer_for_user(*, user_id: int | None) -> Viewer:
    """The viewer a user acts as (blocking: two small queries)."""
    if user_id is None:
        return ANONYMOUS
    flags = User.objects.filter(pk=user_id, is_active=True).values("is_staff", "is_superuser").first()
    if flags is None:
        return ANONYMOUS
    groups = frozenset(Group.objects.filter(user__id=user_id).values_list("id", flat=True))
    return Viewer(user_id=user_id, staff=bool(flags["is_staff"] or flags["is_superuser"]), group_ids=groups)


class _Cached:
    """The restriction map, re-read at most every CACHE_SECONDS: every request checks it, and a change
    made on another replica reaches this one within that time (one made here, at once: forget())."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: dict[str, frozenset[int]] | None = None
        self._read_at = 0.0

    def get(self) -> dict[str, frozenset[int]]:
        with self._lock:
            if self._value is None or time.monotonic() - self._read_at > CACHE_SECONDS:
                self._value, self._read_at = _read_restrictions(), time.monotonic()
            return self._value

    def forget(self) -> None:
        with self._lock:
            self._value = None


CACHE_SECONDS = 2.0
_cache = _Cached()


def _read_restrictions() -> dict[str, frozenset[int]]:
    allowed: dict[str, set[int]] = {
        name: set()
        for name in ModelRegistration.objects.filter(restricted=True).values_list("name", flat=True)
    }
    through = ModelRegistration.allowed_groups.through
    rows = through.objects.filter(modelregistration__restricted=True)
    for name, group_id in rows.values_list("modelregistration__name", "group_id"):
        allowed[name].add(group_id)
    return {name: frozenset(ids) for name, ids in allowed.items()}


def restrictions() -> dict[str, frozenset[int]]:
    """Restricted model name -> the groups allowed to use it, perhaps none (blocking when the cache is
    stale)."""
    return _cache.get()


def restrictions_changed() -> None:
    """Call after changing a model's allowed groups: this process re-reads them at once."""
    _cache.forget()


def may_use(viewer: Viewer, name: str, restricted: dict[str, frozenset[int]]) -> bool:
    groups = restricted.get(name)
    return groups is None or viewer.staff or not groups.isdisjoint(viewer.group_ids)


def visible(viewer: Viewer, infos: Iterable[ModelInfo]) -> list[ModelInfo]:
    """The models `viewer` may see and use, in the manager's order (blocking)."""
    restricted = restrictions()
    return [info for info in infos if may_use(viewer, info.name, restricted)]


def canonical_name(manager: ModelManagerClient, requested: str | None) -> str | None:
    """The registry name `requested` (a name, an alias, or None for the default) stands for, if any."""
    if requested is None:
        return manager.default_name
    for info in manager.list():
        if requested == info.name or requested in info.aliases:
            return info.name
    return None


def ensure_may_use(viewer: Viewer, manager: ModelManagerClient, requested: str | None) -> None:
    """NotFound, worded as for a model that does not exist, when `viewer` may not use `requested`
    (blocking). A name no model answers to is left to the manager, which says the same."""
    name = canonical_name(manager, requested)
    if name is not None and not may_use(viewer, name, restrictions()):
        shown = requested if requested is not None else "default"
        raise NotFound(f"model {shown!r} does not exist", param="model", code="model_not_found")
