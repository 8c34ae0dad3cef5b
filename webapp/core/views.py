"""Version and the first-run setup page. Thin: the logic is in services.py."""

from __future__ import annotations

from django.contrib.auth import login
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from webapp.core.forms import FirstAdminForm
from webapp.core.selectors import users_exist
from webapp.core.services import SetupAlreadyDoneError, first_admin_create
from webapp.core.setup_access import log_setup_link, setup_allowed
from webapp.core.site import BANNER_COOKIE
from webapp.core.version import app_version


@require_GET
async def version(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"version": app_version()})


@never_cache
@require_http_methods(["GET", "POST"])
def setup(request: HttpRequest) -> HttpResponse:
    if users_exist():
        raise Http404("Setup is done.")
    token = str(request.POST.get("token") or request.GET.get("token") or "")
    if not setup_allowed(request, token):
        log_setup_link()  # the operator finds the link in the log; the visitor learns nothing
        return render(request, "core/setup_token.html", {"wrong_token": bool(token)}, status=403)
    form = FirstAdminForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = first_admin_create(
                username=form.cleaned_data["username"],
                email=form.cleaned_data["email"],
                password=form.cleaned_data["password1"],
            )
        except SetupAlreadyDoneError as exc:
            raise Http404("Setup is done.") from exc
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        return redirect("/")
    return render(request, "core/setup.html", {"form": form, "token": token})


@require_POST
def banner_dismiss(request: HttpRequest) -> HttpResponse:
    """Hide the site's banner in this browser until it says something new (its revision changes)."""
    revision = request.POST.get("revision", "")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=False):
        target = "/"
    response = redirect(target)
    if revision.isdigit() and len(revision) < 12:
        response.set_cookie(
            BANNER_COOKIE, revision, max_age=365 * 24 * 3600, samesite="Lax", httponly=True,
            secure=request.is_secure(),
        )  # fmt: skip
    return response
