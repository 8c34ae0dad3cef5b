"""Feedback on chat replies for admins: the list (filter by rating and model) and each chat read-only."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.console.audit import audit_record
from webapp.console.views.access import staff_required
from webapp.organize import selectors
from webapp.organize.forms import FeedbackFilterForm


@staff_required
@require_GET
def feedback_page(request: HttpRequest) -> HttpResponse:
    form = FeedbackFilterForm(request.GET or None)
    # A filter that does not validate is ignored rather than hiding the list.
    cleaned = form.cleaned_data if form.is_valid() else {}
    page = selectors.feedback_page(
        rating=cleaned.get("rating", ""), model=cleaned.get("model", ""), page=request.GET.get("page")
    )
    context = {
        "form": form,
        "page": page,
        "rating": cleaned.get("rating", ""),
        "model": cleaned.get("model", ""),
        "models": selectors.feedback_models(),
    }
    return render(request, "console/feedback.html", context)


@staff_required
@require_GET
def feedback_conversation(request: HttpRequest, pk: int) -> HttpResponse:
    """A rated chat, read-only: the rated replies and what led to them, with the feedback beside them.
    Every view is in the audit log: it is someone's conversation."""
    conversation, rows = selectors.rated_exchanges_for_staff(conversation_id=pk)
    audit_record(
        actor=request.user,
        action="feedback.read_chat",
        target=f"chat {conversation.pk} of {conversation.user.username}",
        after={"messages": len(rows)},
    )
    return render(request, "console/feedback_conversation.html", {"conversation": conversation, "rows": rows})
