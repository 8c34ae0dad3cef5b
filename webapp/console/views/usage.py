"""Usage: tokens and requests per day, user, group, model or source, as a chart, a table and CSV."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.organisation_forms import SORTS, UsageFilterForm
from webapp.console.usage import UsageQuery, chart_bars, usage_csv, usage_report
from webapp.console.views.access import staff_required
from webapp.organize.selectors import feedback_per_model


@staff_required
@require_GET
def usage_page(request: HttpRequest) -> HttpResponse:
    form = UsageFilterForm(request.GET or None)
    valid = form.is_valid() if request.GET else True
    # A bad field is shown with its error and the report falls back to the defaults, never to a 500.
    data = form.cleaned_data if valid and request.GET else {}
    report = usage_report(UsageQuery.from_form(data))
    if request.GET.get("format") == "csv" and valid:
        response = HttpResponse(usage_csv(report), content_type="text/csv; charset=utf-8")
        name = f"mooncake-usage-{report.query.by}-{report.query.start}-{report.query.end}.csv"
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
    query = {k: v for k, v in request.GET.items() if k not in ("sort", "format") and v}
    # A column's link sorts it descending first, and flips the direction when it is the current sort.
    flip = {column: column if report.query.sort == f"-{column}" else f"-{column}" for column in SORTS}
    sort_links = {column: "?" + urlencode({**query, "sort": flip[column]}) for column in SORTS}
    since = dt.datetime.combine(report.query.start, dt.time(), tzinfo=dt.UTC)
    context = {
        "feedback": feedback_per_model(since=since),
        "form": form,
        "report": report,
        "bars": chart_bars(report.days),
        "sort_links": sort_links,
        "csv_link": "?" + urlencode({**request.GET.dict(), "format": "csv"}),
    }
    return render(request, "console/usage.html", context, status=200 if valid else 400)
