"""Read-side queries for preferences: a user sees their own prompts and shared ones, never others' private."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from django.contrib.auth.models import User
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.http import Http404

from webapp.core.errors import PermissionDenied
from webapp.core.selectors import model_defaults
from webapp.preferences.models import SavedPrompt, UserDefaults
from webapp.serving.model_access import viewer_for_user, visible
from webapp.serving.runtime import get_runtime

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Defaults = TypeVar("Defaults", bound="DataclassInstance")

# The most prompts the composer's list receives (a user's own are capped lower, shared ones are not).
LIBRARY_LIMIT = 500


@dataclass(frozen=True, slots=True)
class ModelOption:
    name: str
    state: str


def defaults_get(*, user: User) -> UserDefaults | None:
    return UserDefaults.objects.filter(user=user).first()


def defaults_for(*, user: User, base: Defaults) -> Defaults:
    """`base` (the server's defaults for a new chat) with the user's own over it.

    A user who picked a model also gets the console's defaults for that model under their own values,
    as the server's defaults come from the default model's."""
    own = defaults_get(user=user)
    if own is None:
        return base
    names = {f.name for f in dataclasses.fields(base)}
    values: dict[str, Any] = {}
    # A model removed since it was chosen falls back to the server's (the chat could not use it).
    known = {option.name for option in model_options()}
    if own.model and (not known or own.model in known):
        console = model_defaults(own.model)
        values.update(console["sampling"])
        if console["system_prompt"]:
            values["system_prompt"] = console["system_prompt"]
        values["model"] = own.model
    if own.system_prompt:
        values["system_prompt"] = own.system_prompt
    for field in ("temperature", "top_p", "max_tokens"):
        if getattr(own, field) is not None:
            values[field] = getattr(own, field)
    return dataclasses.replace(base, **{k: v for k, v in values.items() if k in names})


def _model_infos(user: User | None) -> list[Any]:
    try:
        infos = get_runtime().manager().list()
    except Exception:  # The settings page must render even when the engine failed to start.
        return []
    if user is not None:  # a model restricted to other groups is not named to this user
        infos = visible(viewer_for_user(user_id=user.pk), infos)
    return list(infos)


def model_options(*, user: User | None = None) -> list[ModelOption]:
    """The chat models the server knows (those `user` may use, when given), for the default-model choice;
    empty when the engine is unavailable. Embedding models (task "embed") are left out: they cannot chat."""
    return [
        ModelOption(name=info.name, state=str(info.state))
        for info in _model_infos(user)
        if info.task != "embed"
    ]


def embedding_model_names(*, user: User | None = None) -> set[str]:
    """Models the default-model choice refuses with their own reason (a crafted form), not "unknown"."""
    return {info.name for info in _model_infos(user) if info.task == "embed"}


def default_model_name() -> str:
    try:
        return get_runtime().manager().default_name or ""
    except Exception:
        return ""


def can_edit(*, user: User, prompt: SavedPrompt) -> bool:
    """Shared prompts belong to the admins; private ones to their owner."""
    return user.is_staff if prompt.shared else prompt.owner_id == user.pk


def visible_prompts(*, user: User) -> QuerySet[SavedPrompt]:
    """The user's own prompts and every shared one, by title."""
    return SavedPrompt.objects.filter(Q(owner=user) | Q(shared=True)).select_related("owner")


def prompt_get(*, user: User, prompt_id: int) -> SavedPrompt:
    """A prompt the user may see, or Http404 (others' private prompts do not exist for them)."""
    prompt = visible_prompts(user=user).filter(pk=prompt_id).first()
    if prompt is None:
        raise Http404("No such prompt")
    return prompt


def prompt_for_edit(*, user: User, prompt_id: int) -> SavedPrompt:
    """A prompt the user may change: 404 when they cannot see it, 403 when it is shared and they are
    no admin."""
    prompt = prompt_get(user=user, prompt_id=prompt_id)
    if not can_edit(user=user, prompt=prompt):
        raise PermissionDenied("Only administrators can change shared prompts.", code="forbidden")
    return prompt


def own_prompt_count(*, user: User) -> int:
    return SavedPrompt.objects.filter(owner=user).count()


def prompt_library(*, user: User) -> tuple[list[dict[str, Any]], bool]:
    """The composer's list: the user's prompts first, then shared ones, at most LIBRARY_LIMIT; and
    whether some were left out."""
    rows = list(
        visible_prompts(user=user)
        .annotate(mine=Case(When(owner=user, then=Value(1)), default=Value(0), output_field=IntegerField()))
        .order_by("-mine", "title", "id")[: LIBRARY_LIMIT + 1]
    )
    items = [
        {"id": p.pk, "title": p.title, "body": p.body, "shared": p.shared, "mine": p.owner_id == user.pk}
        for p in rows[:LIBRARY_LIMIT]
    ]
    return items, len(rows) > LIBRARY_LIMIT
