"""Groups: who belongs to them, what their members may use together, and which models they open.

A group's policy (accounts.GroupPolicy) holds limits on top of each member's own and a daily token quota
over all of them; ModelRegistration.allowed_groups says which restricted models its members may use.

Membership and policy limit people as their own limits do, so the rule of console.users holds here too:
an admin who is no owner may not put another admin or an owner into a group or take them out, nor change
the limits of (or delete) a group that has one in it. Otherwise a group is a way round that rule.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models import Q

from webapp.accounts.models import GroupPolicy
from webapp.console.users import action_refusal, role_of
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import restrictions_changed

POLICY_FIELDS = ("requests_per_minute", "tokens_per_minute", "max_concurrent_requests", "daily_token_quota")
# What the group page's policy form edits: the limits, plus what is not a limit.
POLICY_FORM_FIELDS = (*POLICY_FIELDS, "description", "api_keys_allowed")


class GroupActionError(ValueError):
    """The change is refused, with a message for the admin."""


class GroupRefused(GroupActionError):
    """The change is not this admin's to make (the views answer 403 before a service ever raises it)."""


def member_refusal(*, actor: User, user: User) -> str | None:
    """Why `actor` may not add `user` to a group or remove them from one, or None when they may."""
    if action_refusal(actor=actor, user=user, action="limits") is None:
        return None
    return f"only an owner can change the groups of another {role_of(user)}"


def protected_members(*, actor: User, group: Group) -> list[User]:
    """The members `actor` may not limit: other admins and owners, unless `actor` is an owner."""
    admins = group.user_set.filter(Q(is_staff=True) | Q(is_superuser=True)).order_by("username")
    return [m for m in admins if member_refusal(actor=actor, user=m)]


def member_candidates(*, actor: User, group: Group, limit: int = 500) -> list[str]:
    """Usernames `actor` may add to the group (the page's suggestions)."""
    users = User.objects.exclude(groups=group)
    if not actor.is_superuser:
        users = users.exclude(Q(is_staff=True) | Q(is_superuser=True), ~Q(pk=actor.pk))
    return list(users.order_by("username").values_list("username", flat=True)[:limit])


def group_refusal(*, actor: User, group: Group) -> str | None:
    """Why `actor` may not change the group's limits and quota or delete it, or None when they may."""
    protected = protected_members(actor=actor, group=group)
    if not protected:
        return None
    names = ", ".join(m.username for m in protected[:5])
    return f"only an owner can change the limits of a group with another admin or owner in it ({names})"


def _ensure(reason: str | None) -> None:
    if reason:
        raise GroupRefused(reason)


def _check_name(name: str, *, except_pk: int | None = None) -> str:
    name = name.strip()
    if not name:
        raise GroupActionError("A group needs a name.")
    clash = Group.objects.filter(name__iexact=name)
    if except_pk is not None:
        clash = clash.exclude(pk=except_pk)
    if clash.exists():
        raise GroupActionError(f"A group named {name!r} already exists.")
    return name


def group_create(*, name: str, description: str = "") -> Group:
    with transaction.atomic():
        group = Group.objects.create(name=_check_name(name))
        GroupPolicy.objects.create(group=group, description=description.strip())
    return group


def group_rename(*, group: Group, name: str) -> Group:
    group.name = _check_name(name, except_pk=group.pk)
    group.save(update_fields=["name"])
    return group


def group_delete(*, actor: User, group: Group) -> None:
    _ensure(group_refusal(actor=actor, group=group))
    group.delete()  # its policy and grants go with it; a model it was the last group of stays restricted
    restrictions_changed()


def models_left_to_admins(*, group: Group) -> list[str]:
    """The models only this group may use (besides admins): deleting it leaves them to admins only."""
    return sorted(
        ModelRegistration.objects.filter(restricted=True, allowed_groups=group)
        .exclude(allowed_groups__in=Group.objects.exclude(pk=group.pk))
        .values_list("name", flat=True)
    )


def member_add(*, actor: User, group: Group, username: str) -> User:
    user = User.objects.filter(username__iexact=username.strip()).first()
    if user is None:
        raise GroupActionError(f"No user is named {username.strip()!r}.")
    _ensure(member_refusal(actor=actor, user=user))
    if group.user_set.filter(pk=user.pk).exists():
        raise GroupActionError(f"{user.username} is already in {group.name}.")
    group.user_set.add(user)
    return user


def member_remove(*, actor: User, group: Group, user: User) -> None:
    _ensure(member_refusal(actor=actor, user=user))
    group.user_set.remove(user)


def policy_of(group: Group) -> GroupPolicy:
    return GroupPolicy.objects.get_or_create(group=group)[0]


def policy_set(*, actor: User, group: Group, values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Set the group's limits and quota (None: none); returns the values before and after."""
    _ensure(group_refusal(actor=actor, group=group))
    policy = policy_of(group)
    before = {name: getattr(policy, name) for name in POLICY_FORM_FIELDS}
    for name in POLICY_FORM_FIELDS:
        if name in values:
            setattr(policy, name, values[name])
    policy.save()
    return before, {name: getattr(policy, name) for name in POLICY_FORM_FIELDS}


def model_access_set(*, registration: ModelRegistration, groups: list[Group]) -> list[str]:
    """Restrict the model to `groups` (none: everyone may use it); returns the names before."""
    before = sorted(registration.allowed_groups.values_list("name", flat=True))
    with transaction.atomic():
        registration.allowed_groups.set(groups)
        registration.restricted = bool(groups)
        registration.save(update_fields=["restricted", "updated_at"])
    restrictions_changed()
    return before
