"""Live metrics: the page (uPlot charts) and the JSON it polls every second.

The charts are this replica's history; with several replicas the headline figures are their total and a
table lists each one (console.fleet). /metrics stays per replica: Prometheus scrapes each and sums itself.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console import fleet
from webapp.console.dashboard import Sampler
from webapp.console.replication import model_sync
from webapp.console.views.access import staff_required
from webapp.serving.runtime import get_runtime


@staff_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    replicas = fleet.snapshot(model_sync().name, get_runtime().service(Sampler).latest())["replicas"]
    return render(request, "console/dashboard.html", {"replicas": replicas, "several": len(replicas) > 1})


@staff_required
@require_GET
def dashboard_data(request: HttpRequest) -> JsonResponse:
    samples = get_runtime().service(Sampler).history()
    return JsonResponse({"samples": samples, **fleet.snapshot(model_sync().name, samples[-1])})
