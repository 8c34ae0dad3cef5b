"""Models page: the table (polled while anything is busy), register, load/unload, defaults."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.console import lifecycle, registry
from webapp.console.audit import audit_record
from webapp.console.forms import ModelDefaultsForm, RegisterHubForm, RegisterLocalForm
from webapp.console.groups import model_access_set
from webapp.console.hf_import import HubImportError, hf_import_start
from webapp.console.model_files import unregistered_models
from webapp.console.organisation_forms import ModelAccessForm
from webapp.console.paths import allowed_roots
from webapp.console.selectors import model_rows
from webapp.console.uploads import CHUNK_BYTES, max_upload_bytes
from webapp.console.views.access import staff_required
from webapp.core.errors import MooncakeError
from webapp.core.models import ModelRegistration


def _table_context(*, error: str = "", notice: str = "") -> dict[str, Any]:
    rows = model_rows()
    forms = {
        r.registration.pk: ModelDefaultsForm.for_registration(r.registration) for r in rows if r.registration
    }
    access = {
        r.registration.pk: ModelAccessForm(
            initial={"groups": list(r.registration.allowed_groups.all())}, prefix=f"access{r.registration.pk}"
        )
        for r in rows
        if r.registration
    }
    return {
        "rows": rows,
        "defaults_forms": forms,
        "access_forms": access,
        "error": error,
        "notice": notice,
    }


def _table(request: HttpRequest, *, error: str = "", notice: str = "") -> HttpResponse:
    return render(request, "console/_models_table.html", _table_context(error=error, notice=notice))


def _page(
    request: HttpRequest, local_form: RegisterLocalForm | None = None, status: int = 200
) -> HttpResponse:
    context = _table_context() | {
        "local_form": local_form or RegisterLocalForm(),
        "hub_form": RegisterHubForm(),
        "model_roots": allowed_roots(),
        "model_files": unregistered_models(),
        "upload_chunk_bytes": CHUNK_BYTES,
        "upload_max_bytes": max_upload_bytes(),
    }
    return render(request, "console/models.html", context, status=status)


# A refused register form comes back to the models page (Post/Redirect/Get): its URL and tab stay right, and a
# reload does not post it again. The fields wait in the session for that one page view.
_REFUSED_FORM = "console-register-refused"


@staff_required
@require_GET
def models_page(request: HttpRequest) -> HttpResponse:
    refused = request.session.pop(_REFUSED_FORM, None)
    return _page(request, RegisterLocalForm(refused) if isinstance(refused, dict) else None)


@staff_required
@require_GET
def models_table(request: HttpRequest) -> HttpResponse:
    return _table(request)


def _done(request: HttpRequest, *, error: str = "", notice: str = "") -> HttpResponse:
    if request.htmx:  # type: ignore[attr-defined]
        return _table(request, error=error, notice=notice)
    if error:
        messages.error(request, error)
    elif notice:
        messages.success(request, notice)
    return redirect("console:models")


@staff_required
@require_POST
def model_register_local(request: HttpRequest) -> HttpResponse:
    form = RegisterLocalForm(request.POST)
    if not form.is_valid():
        request.session[_REFUSED_FORM] = {k: v for k, v in request.POST.items() if k != "csrfmiddlewaretoken"}
        return redirect("console:models")
    data = form.cleaned_data
    try:
        row = lifecycle.model_register(
            name=data["name"],
            source=str(data["path"]),
            aliases=data["aliases"],
            keep_alive_seconds=data["keep_alive_seconds"],
            task=data["task"] or "generate",
        )
    except (MooncakeError, ValueError) as exc:  # a taken name; a config the engine refuses
        messages.error(request, str(exc))
        return redirect("console:models")
    after = registry.registration_snapshot(row)
    audit_record(actor=request.user, action="model.register", target=row.name, after=after)
    messages.success(request, f"Registered {row.name}.")
    return redirect("console:models")


@staff_required
@require_POST
def model_register_hub(request: HttpRequest) -> HttpResponse:
    form = RegisterHubForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Enter a Hugging Face repo id.")
        return redirect("console:models")
    try:
        job = hf_import_start(actor=request.user, repo_id=form.cleaned_data["repo_id"])
    except HubImportError as exc:
        messages.error(request, str(exc))
        return redirect("console:models")
    audit_record(actor=request.user, action="model.import", target=job.target, after={"job": job.pk})
    messages.success(request, f"Import of {job.target} queued; follow it on the jobs page.")
    return redirect("console:jobs")


def _model_action(request: HttpRequest, name: str, action: str) -> HttpResponse:
    try:
        if action == "load":
            lifecycle.model_load(name=name)
        elif action == "unload":
            lifecycle.model_unload(name=name)
        else:
            lifecycle.model_set_default(name=name)
    except (MooncakeError, ValueError) as exc:
        return _done(request, error=str(exc))
    audit_record(actor=request.user, action=f"model.{action}", target=name)
    return _done(request)


@staff_required
@require_POST
def model_load(request: HttpRequest, name: str) -> HttpResponse:
    return _model_action(request, name, "load")


@staff_required
@require_POST
def model_unload(request: HttpRequest, name: str) -> HttpResponse:
    return _model_action(request, name, "unload")


@staff_required
@require_POST
def model_set_default(request: HttpRequest, name: str) -> HttpResponse:
    return _model_action(request, name, "set_default")


@staff_required
@require_POST
def model_delete(request: HttpRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(ModelRegistration, pk=pk)
    before = registry.registration_snapshot(row)
    lifecycle.model_unregister(registration=row)
    audit_record(actor=request.user, action="model.unregister", target=row.name, before=before)
    return _done(request, notice=f"Unregistered {row.name}.")


@staff_required
@require_POST
def model_defaults(request: HttpRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(ModelRegistration, pk=pk)
    form = ModelDefaultsForm.for_registration(row, request.POST)
    if not form.is_valid():
        errors = "; ".join(f"{k}: {' '.join(str(e) for e in v)}" for k, v in form.errors.items())
        return _done(request, error=f"{row.name}: {errors}")
    before = registry.registration_snapshot(row)
    needs_restart = registry.registration_update_defaults(registration=row, values=form.defaults())
    audit_record(
        actor=request.user, action="model.defaults", target=row.name, before=before,
        after=registry.registration_snapshot(row),
    )  # fmt: skip
    if needs_restart:
        try:
            lifecycle.model_restart(registration=row)
        except MooncakeError as exc:
            return _done(request, error=str(exc))
        return _done(request, notice=f"Saved; {row.name} restarts to apply them.")
    return _done(request, notice=f"Saved {row.name}'s defaults.")


@staff_required
@require_POST
def model_access(request: HttpRequest, pk: int) -> HttpResponse:
    row = get_object_or_404(ModelRegistration, pk=pk)
    form = ModelAccessForm(request.POST, prefix=f"access{row.pk}")
    if not form.is_valid():
        return _done(request, error=f"{row.name}: choose groups from the list.")
    groups = list(form.cleaned_data["groups"])
    before = model_access_set(registration=row, groups=groups)
    after = sorted(group.name for group in groups)
    audit_record(
        actor=request.user, action="model.access", target=row.name,
        before={"groups": before}, after={"groups": after},
    )  # fmt: skip
    whom = f"members of {', '.join(after)} (and admins)" if after else "every user"
    return _done(request, notice=f"{row.name} is now for {whom}.")
