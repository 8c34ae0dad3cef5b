"""Who is calling: resolves `Authorization: Bearer <key>` under settings.MOONCAKE_API_AUTH."""

from __future__ import annotations

from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest

from webapp.accounts.limits import admission_checks
from webapp.accounts.models import ApiKey
from webapp.accounts.selectors import api_key_get_active, default_limits
from webapp.accounts.services import api_key_touch
from webapp.core.errors import AuthenticationFailed
from webapp.serving.limits import Bucket, Limits
from webapp.serving.model_access import ANONYMOUS, Viewer, viewer_for_user


@dataclass(frozen=True, slots=True)
class Caller:
    api_key: ApiKey | None
    user_id: int | None
    limit_checks: list[tuple[Bucket, Limits]]
    viewer: Viewer = ANONYMOUS  # whose access to models applies: the key's user's

    @property
    def api_key_id(self) -> int | None:
        return self.api_key.pk if self.api_key else None


# Said wherever a key is asked for: the 401 and `mooncake serve`'s start-up lines.
WHERE_KEYS_COME_FROM = "An admin creates keys on the console's Users page (/console/users/, a user's Keys)."


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _unauthorized(message: str) -> AuthenticationFailed:
    return AuthenticationFailed(message, code="invalid_api_key")


def _resolve(token: str | None) -> Caller:
    required = getattr(settings, "MOONCAKE_API_AUTH", "required") == "required"
    api_key = api_key_get_active(secret=token) if token else None
    if api_key is None:
        if required:
            raise _unauthorized(
                ("Invalid API key." if token else "Missing API key (Authorization: Bearer <key>).")
                + f" {WHERE_KEYS_COME_FROM}"
            )
        # With auth off, SDKs still send some placeholder key: treat any unknown key as anonymous.
        return Caller(
            api_key=None, user_id=None, limit_checks=[("anonymous", default_limits())], viewer=ANONYMOUS
        )
    api_key_touch(api_key=api_key)
    return Caller(
        api_key=api_key,
        user_id=api_key.user_id,
        limit_checks=admission_checks(user_id=api_key.user_id, api_key=api_key),
        viewer=viewer_for_user(user_id=api_key.user_id),
    )


async def authenticate(request: HttpRequest) -> Caller:
    token = _bearer(request)
    if token is None:
        # No key means no database work (anonymous, or 401): skip the hop onto Django's single
        # thread-sensitive executor, where a burst of requests would otherwise queue one by one.
        return _resolve(None)
    return await sync_to_async(_resolve)(token)
