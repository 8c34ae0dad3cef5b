"""API keys people make and revoke themselves (Settings, API keys), when an admin allows it.

Allowed for admins always (they can issue keys in the console anyway), for everyone when the site-wide
switch (SiteSettings.user_api_keys) is on, and for members of a group whose policy allows it. Revoking
one's own key is always allowed: taking a credential away is never the risky direction.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from webapp.accounts.events import account_event
from webapp.accounts.models import ApiKey, GroupPolicy
from webapp.accounts.services import CreatedKey, api_key_create, api_key_revoke
from webapp.core.errors import InvalidRequest, NotFound, PermissionDenied
from webapp.core.models import SiteSettings

MAX_NAME_CHARS = 100  # ApiKey.name
# Plenty for one person's scripts and machines; stops a runaway script from minting keys without end.
MAX_ACTIVE_OWN_KEYS = 25
ISSUED_BY_ADMIN = "API keys are issued by an admin here: ask one for a key."


def own_keys_allowed(*, user: User) -> bool:
    if user.is_staff:
        return True
    site = SiteSettings.objects.filter(pk=SiteSettings.SINGLETON).only("user_api_keys").first()
    if site is not None and site.user_api_keys:
        return True
    return GroupPolicy.objects.filter(group__user=user, api_keys_allowed=True).exists()


def api_auth_required() -> bool:
    """False when MOONCAKE_API_AUTH is off: the API then takes any key, or none, as anonymous."""
    return getattr(settings, "MOONCAKE_API_AUTH", "required") == "required"


def own_keys(*, user: User) -> list[ApiKey]:
    """The user's keys still in force, newest first (revoked ones stop mattering to their owner)."""
    return list(ApiKey.objects.filter(user=user, revoked_at__isnull=True).order_by("-created_at"))


@dataclass(frozen=True, slots=True)
class KeysSection:
    keys: list[ApiKey]
    can_create: bool
    auth_required: bool
    max_keys: int = MAX_ACTIVE_OWN_KEYS


def keys_section(*, user: User) -> KeysSection:
    return KeysSection(
        keys=own_keys(user=user), can_create=own_keys_allowed(user=user), auth_required=api_auth_required()
    )


def own_key_create(*, user: User, name: str) -> CreatedKey:
    """A new key for `user`; the secret is in the result only, its hash in the database."""
    if not own_keys_allowed(user=user):
        raise PermissionDenied(ISSUED_BY_ADMIN, code="keys_not_allowed")
    name = name.strip()
    if len(name) > MAX_NAME_CHARS:
        raise InvalidRequest(f"The name is longer than {MAX_NAME_CHARS} characters.", param="name")
    with transaction.atomic():
        # Locks the user's row so two quick submits cannot both pass the count.
        User.objects.select_for_update().filter(pk=user.pk).first()
        if ApiKey.objects.filter(user=user, revoked_at__isnull=True).count() >= MAX_ACTIVE_OWN_KEYS:
            raise InvalidRequest(
                f"You have {MAX_ACTIVE_OWN_KEYS} keys: revoke one you no longer use first.",
                param="name",
                code="too_many_keys",
            )
        created = api_key_create(user=user, name=name)
        account_event(
            actor=user, action="key.create", target=f"{user.username}:{created.api_key.prefix}",
            after={"name": name, "by": "owner"},
        )  # fmt: skip
    return created


def own_key_revoke(*, user: User, key_id: int) -> ApiKey:
    """Revoke one of `user`'s keys; another's (or none) is NotFound, so ids of others' keys leak nothing."""
    key = ApiKey.objects.filter(pk=key_id, user=user, revoked_at__isnull=True).first()
    if key is None:
        raise NotFound("No such key.", code="key_not_found")
    with transaction.atomic():
        api_key_revoke(api_key=key)
        account_event(actor=user, action="key.revoke", target=f"{user.username}:{key.prefix}")
    return key
