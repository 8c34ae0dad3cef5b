"""The models page's GGUF upload (static/console/upload.js drives it) and its one-click Register of the
files found under the model roots. The upload answers JSON: {"error": ...} with 400 for what it refuses."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from webapp.console import registry, uploads
from webapp.console.audit import audit_record
from webapp.console.model_files import model_file_register
from webapp.console.upload_forms import UploadStartForm
from webapp.console.views.access import staff_required
from webapp.core.body_limits import declared_length
from webapp.core.errors import MooncakeError


def _refused(message: str, status: int = 400, **extra: object) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


@staff_required
@require_POST
def upload_start(request: HttpRequest) -> HttpResponse:
    """How many bytes of this file (name and size) the server has: 0 for a new upload."""
    form = UploadStartForm(request.POST)
    if not form.is_valid():
        return _refused(" ".join(str(e) for errors in form.errors.values() for e in errors))
    try:
        state = uploads.upload_begin(name=form.cleaned_data["name"], size=form.cleaned_data["size"])
    except (uploads.UploadError, OSError) as exc:
        return _refused(str(exc))
    return JsonResponse(
        {"name": state.name, "size": state.size, "offset": state.offset, "chunk_bytes": uploads.CHUNK_BYTES}
    )


@staff_required
@require_http_methods(["PUT"])
def upload_chunk(request: HttpRequest, name: str) -> HttpResponse:
    """Append the body at ?offset=N; 409 with the server's offset when N is not where the file ends."""
    raw = request.GET.get("offset", "")
    length = declared_length(request)
    if not raw.isdigit():
        return _refused("Give the chunk's offset as ?offset=<bytes>.")
    if length is None:
        return _refused("A chunk needs a Content-Length.")
    try:
        # request.read, never request.body: the body streams from the server's spool file to the part file.
        state = uploads.upload_append(name=name, offset=int(raw), body=request, length=length)
    except uploads.OffsetMismatch as exc:
        return _refused(str(exc), status=409, offset=exc.offset)
    except (uploads.UploadError, OSError) as exc:
        return _refused(str(exc))
    return JsonResponse({"name": state.name, "size": state.size, "offset": state.offset})


@staff_required
@require_POST
def upload_finish(request: HttpRequest, name: str) -> HttpResponse:
    """Check the whole file as a GGUF, move it into the models folder and register it under its name."""
    try:
        path = uploads.upload_finish(name=name)
    except (uploads.UploadError, OSError) as exc:
        return _refused(str(exc))
    audit_record(actor=request.user, action="model.upload", target=path.name, after={"path": str(path)})
    try:
        row = model_file_register(path=str(path))
    except (MooncakeError, ValueError) as exc:  # saved, but not registrable as it is: the list offers it
        notice = f"Saved {path.name} in the models folder, but could not register it: {exc}"
        messages.warning(request, notice)
        return JsonResponse({"saved": path.name, "registered": None, "notice": notice})
    after = registry.registration_snapshot(row)
    audit_record(actor=request.user, action="model.register", target=row.name, after=after)
    notice = f"Uploaded {path.name} and registered it as {row.name}: load it from the table."
    messages.success(request, notice)  # shown on the models page the browser goes back to
    return JsonResponse({"saved": path.name, "registered": row.name, "notice": notice})


@staff_required
@require_POST
def upload_discard(request: HttpRequest, name: str) -> HttpResponse:
    try:
        uploads.upload_discard(name=name)
    except uploads.UploadError as exc:
        return _refused(str(exc))
    return JsonResponse({"discarded": True})


@staff_required
@require_POST
def model_file_register_view(request: HttpRequest) -> HttpResponse:
    """Register a file from the list of unregistered model files, named after it."""
    path = request.POST.get("path", "")
    try:
        row = model_file_register(path=path)
    except (MooncakeError, ValueError) as exc:  # outside the roots, not a model, a name taken meanwhile
        messages.error(request, str(exc))
        return redirect("console:models")
    after = registry.registration_snapshot(row)
    audit_record(actor=request.user, action="model.register", target=row.name, after=after)
    messages.success(request, f"Registered {row.name}; load it from the table.")
    return redirect("console:models")
