"""Console: the sign-up policy, accounts waiting for approval, and login locks (with unlock)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.forms import SignupSettingsForm
from webapp.accounts.oidc import oidc_enabled
from webapp.accounts.selectors import pending_account_get, pending_accounts, signup_settings_get
from webapp.accounts.signup import account_approve, account_reject, signup_settings_set
from webapp.accounts.throttle import LOCK_KINDS, lock_get, lock_release, locks_current
from webapp.console.audit import audit_record
from webapp.console.views.access import staff_required


def _actor(request: HttpRequest) -> User:
    user = request.user
    if not isinstance(user, User):
        raise TypeError("staff_required guarantees a signed-in user")
    return user


def _page(request: HttpRequest, form: SignupSettingsForm | None = None, *, status: int = 200) -> HttpResponse:
    row = signup_settings_get()
    context = {
        "settings_form": form
        or SignupSettingsForm(
            initial={"enabled": row.enabled, "auto_approve_domains": "\n".join(row.domains)}
        ),
        "pending": pending_accounts(),
        "locks": locks_current(),
        "sso_enabled": oidc_enabled(),
    }
    return render(request, "console/accounts.html", context, status=status)


@staff_required
@require_GET
def accounts_page(request: HttpRequest) -> HttpResponse:
    return _page(request)


@staff_required
@require_POST
def signup_settings(request: HttpRequest) -> HttpResponse:
    form = SignupSettingsForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=400)
    signup_settings_set(
        actor=_actor(request),
        enabled=form.cleaned_data["enabled"],
        domains=form.cleaned_data["auto_approve_domains"],
    )
    messages.success(request, "Sign-up settings saved.")
    return redirect("console:accounts")


@staff_required
@require_POST
def account_approve_view(request: HttpRequest, pk: int) -> HttpResponse:
    status = pending_account_get(pk=pk)
    if status is None:
        raise Http404("No account with this id is waiting for approval.")
    account_approve(actor=_actor(request), status=status)
    messages.success(request, f"Approved {status.user.username}: they can log in now.")
    return redirect("console:accounts")


@staff_required
@require_POST
def account_reject_view(request: HttpRequest, pk: int) -> HttpResponse:
    status = pending_account_get(pk=pk)
    if status is None:
        raise Http404("No account with this id is waiting for approval.")
    account_reject(actor=_actor(request), status=status)
    messages.success(request, f"Rejected {status.user.username}.")
    return redirect("console:accounts")


@staff_required
@require_POST
def lock_release_view(request: HttpRequest) -> HttpResponse:
    kind, value = request.POST.get("kind", ""), request.POST.get("value", "")
    if kind not in LOCK_KINDS or not value or len(value) > 255:
        return _page_with_error(request, "Choose a lock from the list to unlock.")
    lock = lock_get(kind=kind, value=value)
    if lock is None:
        messages.info(request, f"{value} is not locked (any more).")
        return redirect("console:accounts")
    forgotten = lock_release(lock=lock)
    audit_record(
        actor=request.user, action="login.unlock", target=f"{lock.label.lower()} {lock.shown}",
        before={"failures": lock.failures}, after={"records_removed": forgotten},
    )  # fmt: skip
    messages.success(request, f"Unlocked {lock.label.lower()} {lock.shown}.")
    return redirect("console:accounts")


def _page_with_error(request: HttpRequest, message: str) -> HttpResponse:
    messages.error(request, message)
    return _page(request, status=400)
