"""Login throttling with django-axes: the backend that refuses locked logins, client addresses, locks."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Max, Sum
from django.http import HttpRequest
from django.utils import timezone


class ThrottleBackend(AxesStandaloneBackend):
    """Axes' check, for logins that come with a request (the login form and SSO).

    Test clients' and scripts' `authenticate()` calls have no request: there is nothing to throttle by,
    so they pass through to the password backend instead of failing.
    """

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> AbstractBaseUser | None:
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def client_ip(request: HttpRequest) -> str:
    """The caller's address: REMOTE_ADDR, or behind MOONCAKE_PROXY_COUNT proxies their X-Forwarded-For entry.

    Only entries our own proxies appended are trusted; anything to their left the client could have sent.
    """
    remote = request.META.get("REMOTE_ADDR", "") or ""
    count = int(getattr(settings, "MOONCAKE_PROXY_COUNT", 0))
    if count <= 0:
        return remote
    hops = [h.strip() for h in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if h.strip()]
    if len(hops) < count:
        return remote
    candidate = hops[-count]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote


def is_locked(request: HttpRequest, *, username: str) -> bool:
    return not AxesProxyHandler.is_allowed(request, {"username": username})


LOCK_KINDS = ("username", "ip_address")


@dataclass(frozen=True, slots=True)
class Lock:
    """A username or an address whose recent failures reach the limit: axes refuses its logins."""

    kind: str  # one of LOCK_KINDS
    value: str
    failures: int
    last_failure: dt.datetime
    expires_at: dt.datetime | None

    @property
    def label(self) -> str:
        return "Account" if self.kind == "username" else "Address"


def locks_current() -> list[Lock]:
    """Every lock in force now, counted the way axes counts (failures summed per username, per address)."""
    limit = int(settings.AXES_FAILURE_LIMIT)
    cooloff: dt.timedelta | None = settings.AXES_COOLOFF_TIME
    rows = AccessAttempt.objects.all()
    if cooloff is not None:
        rows = rows.filter(attempt_time__gte=timezone.now() - cooloff)
    locks: list[Lock] = []
    for kind in LOCK_KINDS:
        # Blank usernames (a login form posted empty) lock nobody; an address field turns "" into NULL.
        named = rows.exclude(**{f"{kind}__isnull": True})
        if kind == "username":
            named = named.exclude(username="")
        grouped = (
            named.values(kind)
            .annotate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
            .filter(failures__gte=limit)
            .order_by("-last")
        )
        locks.extend(
            Lock(
                kind=kind,
                value=str(g[kind]),
                failures=int(g["failures"]),
                last_failure=g["last"],
                expires_at=g["last"] + cooloff if cooloff is not None else None,
            )
            for g in grouped
        )
    return sorted(locks, key=lambda lock: lock.last_failure, reverse=True)


def lock_get(*, kind: str, value: str) -> Lock | None:
    return next((lock for lock in locks_current() if (lock.kind, lock.value) == (kind, value)), None)


def lock_release(*, lock: Lock) -> int:
    """Forget the failures that make up a lock, so the username or address may log in again at once."""
    deleted, _ = AccessAttempt.objects.filter(**{lock.kind: lock.value}).delete()
    return deleted
