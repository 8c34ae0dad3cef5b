"""Live metrics: the page (uPlot charts) and the JSON it polls every second."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.dashboard import Sampler
from webapp.console.views.access import staff_required
from webapp.core.runtime import get_runtime


@staff_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    return render(request, "console/dashboard.html")


@staff_required
@require_GET
def dashboard_data(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"samples": get_runtime().service(Sampler).history()})
