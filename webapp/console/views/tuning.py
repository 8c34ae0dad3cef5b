"""Engine tuning: validated settings; applying them restarts the engines gracefully."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from webapp.console import lifecycle
from webapp.console.forms import TuningForm
from webapp.console.registry import sync_manager
from webapp.console.tuning import engine_settings_update
from webapp.console.views.access import staff_required
from webapp.core.engine_settings import engine_settings_get
from webapp.core.errors import MooncakeError


@staff_required
@require_http_methods(["GET", "POST"])
def tuning(request: HttpRequest) -> HttpResponse:
    row = engine_settings_get()
    form = TuningForm(request.POST or None, instance=row)
    if request.method == "POST":
        if not form.is_valid():
            return render(request, "console/tuning.html", {"form": form}, status=400)
        _, restart = engine_settings_update(actor=request.user, values=form.cleaned_data)
        sync_manager()  # budget, eviction policy and prompt logging apply at once
        if restart:
            try:
                lifecycle.restart_all()
            except MooncakeError as exc:
                messages.error(request, f"Saved, but the restart did not start: {exc}")
                return redirect("console:tuning")
            messages.success(request, "Saved; the engines restart (running requests drain first).")
        else:
            messages.success(request, "Saved.")
        return redirect("console:tuning")
    return render(request, "console/tuning.html", {"form": form})
