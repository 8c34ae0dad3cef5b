"""The request log (API and chat), filtered and paginated; every filter and the page live in the URL."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.forms import RequestFilterForm
from webapp.console.selectors import RequestFilters, request_log_page
from webapp.console.views.access import staff_required
from webapp.core.engine_settings import engine_settings_get


def _filters(form: RequestFilterForm) -> RequestFilters:
    # A field that does not validate is left out (and its error shown), the others still apply: a typo in
    # one box must not hide the log or throw away the rest of a shared URL's filters.
    form.is_valid()
    cleaned = getattr(form, "cleaned_data", {})
    return RequestFilters(**{k: v for k, v in cleaned.items() if v not in ("", None)})


@staff_required
@require_GET
def requests_page(request: HttpRequest) -> HttpResponse:
    form = RequestFilterForm(request.GET or None)
    page = request_log_page(_filters(form), request.GET.get("page"))
    htmx = request.htmx  # type: ignore[attr-defined]
    # A history restore (Back after filtering) needs the whole page, not the rows.
    partial = bool(htmx) and not htmx.history_restore_request
    template = "console/_requests_rows.html" if partial else "console/requests.html"
    context = {
        "form": form,
        "page": page,
        "rows": page.object_list,
        "log_prompts": engine_settings_get().log_prompts,
    }
    return render(request, template, context)
