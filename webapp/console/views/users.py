"""Users: create, (de)activate, promote, reset passwords; their limits and daily usage."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_cache_control
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.accounts.selectors import api_key_list, usage_daily_for_key, usage_daily_for_user
from webapp.accounts.services import LIMIT_FIELDS, user_limits_set
from webapp.console import users as user_services
from webapp.console.audit import audit_record
from webapp.console.selectors import users_list
from webapp.console.user_forms import KeyCreateForm, LimitsForm, UserCreateForm
from webapp.console.views.access import staff_required


def _actor(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):
        raise TypeError("staff_required guarantees a signed-in user")
    return user


@staff_required
@require_http_methods(["GET", "POST"])
def users_page(request: HttpRequest) -> HttpResponse:
    actor = _actor(request)
    form = UserCreateForm(request.POST or None, may_make_admins=actor.is_superuser)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            user = user_services.user_create(
                actor=actor,
                username=data["username"],
                password=data["password"],
                is_staff=data["is_staff"],
                email=data["email"],
                groups=data.get("groups") or (),  # no field when there are no groups
            )
        except (user_services.UserActionError, ValidationError) as exc:
            form.add_error(None, exc.messages if isinstance(exc, ValidationError) else str(exc))
        else:
            groups = sorted(user.groups.values_list("name", flat=True))
            audit_record(
                actor=request.user, action="user.create", target=user.username,
                after={"is_staff": user.is_staff, "email": user.email, "groups": groups},
            )  # fmt: skip
            messages.success(request, f"Created {user.username}.")
            return redirect("console:user", pk=user.pk)
    status = 400 if request.method == "POST" else 200
    return render(request, "console/users.html", {"users": users_list(), "form": form}, status=status)


@staff_required
@require_GET
def user_page(request: HttpRequest, pk: int) -> HttpResponse:
    return render_user_page(request, get_object_or_404(User, pk=pk))


def render_user_page(
    request: HttpRequest, user: User, *, new_secret: str | None = None, new_password: str | None = None
) -> HttpResponse:
    """The user's page; a new secret is shown in this one response and kept nowhere, not even the session."""
    limits = getattr(user, "api_limits", None)
    keys = list(api_key_list(user=user))
    actor = _actor(request)
    context = {
        "subject": user,
        # Only what the server would carry out (console.users.action_refusal): on one's own page neither
        # Deactivate nor Remove admin; for an admin who is no owner, nothing on another admin's page.
        "can": {
            action: user_services.action_refusal(actor=actor, user=user, action=action) is None
            for action in user_services.ACTIONS
        },
        "role": user_services.role_of(user),
        "groups": user.groups.order_by("name"),
        "own_account": actor.pk == user.pk,
        "keys": [
            (key, LimitsForm(initial=_limits(key), prefix=f"k{key.pk}"), usage_daily_for_key(api_key=key)[:7])
            for key in keys
        ],
        "limits_form": LimitsForm(initial=_limits(limits) if limits else None),
        "key_form": KeyCreateForm(),
        "usage": usage_daily_for_user(user=user)[:14],
        "new_secret": new_secret,
        "new_password": new_password,
    }
    response = render(request, "console/user.html", context)
    if new_secret or new_password:
        patch_cache_control(response, no_store=True, private=True)
    return response


def refuse_unless_allowed(request: HttpRequest, user: User, action: str) -> None:
    """A 403 with the reason (the designed error page shows it) for what this admin may not do here."""
    reason = user_services.action_refusal(actor=_actor(request), user=user, action=action)
    if reason:
        raise PermissionDenied(reason[0].upper() + reason[1:] + ".")


def _limits(obj: object) -> dict[str, int | None]:
    return {name: getattr(obj, name) for name in LIMIT_FIELDS}


@staff_required
@require_POST
def user_toggle(request: HttpRequest, pk: int, field: str) -> HttpResponse:
    if field not in ("active", "staff", "owner"):
        raise Http404("Unknown field.")
    user = get_object_or_404(User, pk=pk)
    refuse_unless_allowed(request, user, field)
    before = {"is_active": user.is_active, "is_staff": user.is_staff, "is_superuser": user.is_superuser}
    try:
        if field == "active":
            user_services.user_set_active(actor=_actor(request), user=user, active=not user.is_active)
        elif field == "staff":
            user_services.user_set_staff(actor=_actor(request), user=user, staff=not user.is_staff)
        else:
            user_services.user_set_owner(actor=_actor(request), user=user, owner=not user.is_superuser)
    except user_services.UserActionError as exc:
        messages.error(request, str(exc))
        return redirect("console:user", pk=pk)
    after = {"is_active": user.is_active, "is_staff": user.is_staff, "is_superuser": user.is_superuser}
    audit_record(actor=request.user, action=f"user.{field}", target=user.username, before=before, after=after)
    return redirect("console:user", pk=pk)


@staff_required
@require_POST
def user_reset_password(request: HttpRequest, pk: int) -> HttpResponse:
    user = get_object_or_404(User, pk=pk)
    refuse_unless_allowed(request, user, "password")
    password = user_services.user_reset_password(user=user)
    audit_record(actor=request.user, action="user.reset_password", target=user.username)
    return render_user_page(request, user, new_password=password)


@staff_required
@require_POST
def user_limits(request: HttpRequest, pk: int) -> HttpResponse:
    user = get_object_or_404(User, pk=pk)
    refuse_unless_allowed(request, user, "limits")
    form = LimitsForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Limits must be positive whole numbers or empty.")
        return redirect("console:user", pk=pk)
    row = getattr(user, "api_limits", None)
    before = _limits(row) if row else None
    user_limits_set(user=user, **form.cleaned_data)
    audit_record(
        actor=request.user, action="user.limits", target=user.username, before=before, after=form.cleaned_data
    )
    messages.success(request, "Limits saved.")
    return redirect("console:user", pk=pk)
