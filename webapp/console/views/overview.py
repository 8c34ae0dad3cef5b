"""The console's landing page at /console/ (console.overview)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.overview import overview
from webapp.console.views.access import staff_required


@staff_required
@require_GET
def overview_page(request: HttpRequest) -> HttpResponse:
    return render(request, "console/overview.html", {"overview": overview()})
