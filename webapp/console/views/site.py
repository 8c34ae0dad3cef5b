"""Site: the default system prompt of new chats and the banner shown to every user."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.console.audit import audit_record
from webapp.console.organisation_forms import SiteSettingsForm
from webapp.console.views.access import staff_required
from webapp.core.site import site_settings, site_settings_update


@staff_required
@require_http_methods(["GET", "POST"])
def site_page(request: HttpRequest) -> HttpResponse:
    row = site_settings()
    initial = {
        "default_system_prompt": row.default_system_prompt,
        "banner_text": row.banner_text,
        "banner_level": row.banner_level,
        "user_api_keys": row.user_api_keys,
    }
    form = SiteSettingsForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        before, after = site_settings_update(**form.cleaned_data)
        audit_record(actor=request.user, action="site.settings", target="site", before=before, after=after)
        messages.success(request, "Saved the site settings.")
        return redirect("console:site")
    status = 400 if request.method == "POST" else 200
    return render(request, "console/site.html", {"form": form}, status=status)
