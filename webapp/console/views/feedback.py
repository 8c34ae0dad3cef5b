"""Feedback on chat replies for admins: the list (filter by rating and model) and each chat read-only."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

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
    """Any user's chat, read-only, with the feedback given on its replies beside them."""
    conversation, rows = selectors.conversation_for_staff(conversation_id=pk)
    return render(request, "console/feedback_conversation.html", {"conversation": conversation, "rows": rows})
