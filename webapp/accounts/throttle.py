"""Login throttling with django-axes: the backend that refuses locked logins, client addresses, locks.

Two locks, so that nobody can lock someone else out: a username fails AXES_FAILURE_LIMIT times at one
address and that username is locked there (from elsewhere, and for every other name behind a shared
address, logins go on); an address fails MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT times over any usernames
(much higher: password spraying) and the whole address is locked.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
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


class PairAndAddressHandler(AxesDatabaseHandler):
    """Axes' database handler (its lockout parameters: the username-and-address pair), and the address's
    own, higher bound across usernames."""

    def is_locked(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> bool:
        return super().is_locked(request, credentials) or _address_locked(request)

    def user_login_failed(
        self, sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
    ) -> None:
        """Axes records the failure and flags the request locked by the pair's count; the address's own
        count flags it too, so the login page answers with the lockout either way."""
        super().user_login_failed(sender, credentials, request, **kwargs)
        if (
            request is not None
            and not getattr(request, "axes_locked_out", False)
            and _address_locked(request)
        ):
            request.axes_locked_out = True  # type: ignore[attr-defined]
            request.axes_credentials = credentials  # type: ignore[attr-defined]


def _address_locked(request: HttpRequest) -> bool:
    address = getattr(request, "axes_ip_address", None) or client_ip(request)
    return address_failures(address) >= int(settings.MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT)


def _recent() -> Any:
    """Failures still counted: those within the cool-off."""
    cooloff: dt.timedelta | None = settings.AXES_COOLOFF_TIME
    rows = AccessAttempt.objects.all()
    return rows if cooloff is None else rows.filter(attempt_time__gte=timezone.now() - cooloff)


def address_failures(address: str) -> int:
    # Summed here: a few rows per address (one per username and browser), on every login attempt.
    return sum(_recent().filter(ip_address=address).values_list("failures_since_start", flat=True))


def is_locked(request: HttpRequest, *, username: str) -> bool:
    return not AxesProxyHandler.is_allowed(request, {"username": username})


# "account": a username at one address; "ip_address": an address, whatever the usernames.
LOCK_KINDS = ("account", "ip_address")


@dataclass(frozen=True, slots=True)
class Lock:
    """A username at an address, or an address, whose recent failures reach its limit."""

    kind: str  # one of LOCK_KINDS
    username: str  # "" for an address lock
    address: str
    failures: int
    last_failure: dt.datetime
    expires_at: dt.datetime | None

    @property
    def label(self) -> str:
        return "Account" if self.kind == "account" else "Address"

    @property
    def value(self) -> str:
        """What the unlock form posts back: the address, after the username for an account lock (an
        address holds no space, so the last one splits them)."""
        return f"{self.username} {self.address}" if self.kind == "account" else self.address

    @property
    def shown(self) -> str:
        return f"{self.username} from {self.address}" if self.kind == "account" else self.address


def locks_current() -> list[Lock]:
    """Every lock in force now, counted the way the handler counts."""
    cooloff: dt.timedelta | None = settings.AXES_COOLOFF_TIME
    # Blank usernames (a login form posted empty) lock nobody; an address field turns "" into NULL.
    rows = _recent().exclude(ip_address__isnull=True)
    limits = {
        "account": int(settings.AXES_FAILURE_LIMIT),
        "ip_address": int(settings.MOONCAKE_LOGIN_ADDRESS_FAILURE_LIMIT),
    }
    keys = {"account": ("username", "ip_address"), "ip_address": ("ip_address",)}
    locks: list[Lock] = []
    for kind in LOCK_KINDS:
        named = rows.exclude(username="").exclude(username__isnull=True) if kind == "account" else rows
        grouped = (
            named.values(*keys[kind])
            .annotate(failures=Sum("failures_since_start"), last=Max("attempt_time"))
            .filter(failures__gte=limits[kind])
            .order_by("-last")
        )
        locks.extend(
            Lock(
                kind=kind,
                username=str(g["username"]) if kind == "account" else "",
                address=str(g["ip_address"]),
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
    """Forget the failures that make up a lock, so the username there, or the address, may log in again."""
    rows = AccessAttempt.objects.filter(ip_address=lock.address)
    if lock.kind == "account":
        rows = rows.filter(username=lock.username)
    deleted, _ = rows.delete()
    return deleted
