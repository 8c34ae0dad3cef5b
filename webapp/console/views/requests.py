"""The API request log with filters."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.forms import RequestFilterForm
from webapp.console.selectors import RequestFilters, request_log
from webapp.console.views.access import staff_required
from webapp.core.engine_settings import engine_settings_get


@staff_required
@require_GET
def requests_page(request: HttpRequest) -> HttpResponse:
    form = RequestFilterForm(request.GET or None)
    filters = (
        RequestFilters(**{k: v for k, v in form.cleaned_data.items() if v not in ("", None)})
        if form.is_valid()
        else RequestFilters()
    )
    htmx = request.htmx  # type: ignore[attr-defined]
    # A history restore (Back after filtering) needs the whole page, not the rows.
    partial = bool(htmx) and not htmx.history_restore_request
    template = "console/_requests_rows.html" if partial else "console/requests.html"
    context = {"form": form, "rows": request_log(filters), "log_prompts": engine_settings_get().log_prompts}
    return render(request, template, context)
