"""Console access: anonymous visitors go to the login page, signed-in non-staff users get a 403."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps

from django.contrib.auth.models import User
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache

View = Callable[..., HttpResponse]


def staff_required(view: View) -> View:
    @wraps(view)
    def wrapped(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        user = request.user
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        if not (user.is_active and user.is_staff):
            raise PermissionDenied("The console is for admins.")
        return view(request, *args, **kwargs)

    return never_cache(wrapped)


def actor_of(request: HttpRequest) -> User:
    """The signed-in admin behind a staff_required view."""
    user = request.user
    if not isinstance(user, User):
        raise TypeError("staff_required guarantees a signed-in user")
    return user


def back(request: HttpRequest, fallback: str) -> HttpResponse:
    """After a non-htmx POST: back to the page it came from (same site only), else `fallback`."""
    referer = request.headers.get("Referer", "")
    host = request.get_host()
    if referer.startswith((f"http://{host}/", f"https://{host}/")):
        return redirect(referer)
    return redirect(fallback)
