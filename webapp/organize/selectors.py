"""Reads for the organised chat list, search, shares and feedback; every lookup is scoped to its owner and
answers Http404 for anyone else's ids, so ids never tell a stranger what exists."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import Http404
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from webapp.chat import selectors as chat_selectors
from webapp.chat.models import Conversation, Message
from webapp.organize import fulltext
from webapp.organize.models import Feedback, Folder, Share
from webapp.organize.services import hash_token

PAGE_SIZE = 30
ARCHIVED_SHOWN = 100
SEARCH_LIMIT = 30
FEEDBACK_PAGE_SIZE = 50


@dataclass
class FolderGroup:
    folder: Folder
    chats: list[Conversation]


@dataclass
class Sidebar:
    pinned: list[Conversation]
    folders: list[FolderGroup]
    recent: Page[Conversation]
    archived: list[Conversation]
    archived_count: int

    @property
    def empty(self) -> bool:
        """Nothing at all to list (the archive aside)."""
        return not (self.pinned or self.recent.object_list or any(g.chats for g in self.folders))


@dataclass
class SearchHit:
    conversation: Conversation
    title_html: SafeString
    snippet_html: SafeString
    archived: bool
    score: float = field(default=0.0)


def folder_get(*, user: User, folder_id: int) -> Folder:
    folder = Folder.objects.filter(user=user, pk=folder_id).first()
    if folder is None:
        raise Http404("No such folder")
    return folder


def folders_of(*, user: User) -> list[Folder]:
    return list(Folder.objects.filter(user=user))


def share_get(*, user: User, share_id: int) -> Share:
    share = Share.objects.filter(conversation__user=user, pk=share_id).select_related("conversation").first()
    if share is None:
        raise Http404("No such link")
    return share


def share_by_token(*, token: str) -> Share:
    """The active share the token opens; a revoked, unknown or malformed token is a 404."""
    if not token or len(token) > 100:
        raise Http404("No such link")
    share = (
        Share.objects.filter(token_hash=hash_token(token), revoked_at__isnull=True)
        .select_related("conversation", "conversation__user")
        .first()
    )
    if share is None:
        raise Http404("No such link")
    return share


def active_shares(*, conversation: Conversation) -> list[Share]:
    return list(Share.objects.filter(conversation=conversation, revoked_at__isnull=True))


def message_get(*, user: User, message_id: int) -> Message:
    message = (
        Message.objects.filter(conversation__user=user, pk=message_id).select_related("conversation").first()
    )
    if message is None:
        raise Http404("No such message")
    return message


def _listed(user: User) -> QuerySet[Conversation]:
    """The user's chats that have messages (an empty draft is not listed, as in the chat's own list)."""
    has_messages = Exists(Message.objects.filter(conversation=OuterRef("pk")))
    return Conversation.objects.filter(user=user).filter(has_messages).select_related("placement")


def sidebar(*, user: User, page: int = 1) -> Sidebar:
    """Pinned chats, then folders, then the rest newest first (paged), then the archive."""
    listed = _listed(user)
    live = listed.filter(placement__archived_at__isnull=True)
    pinned = list(live.filter(placement__pinned_at__isnull=False).order_by("-placement__pinned_at"))
    groups = {f.pk: FolderGroup(f, []) for f in folders_of(user=user)}
    filed = live.filter(placement__pinned_at__isnull=True, placement__folder__isnull=False)
    for chat in filed.order_by("-updated_at", "-id"):
        group = groups.get(chat.placement.folder_id or 0)
        if group is not None:
            group.chats.append(chat)
    rest = listed.filter(
        Q(placement__isnull=True)
        | Q(
            placement__pinned_at__isnull=True,
            placement__archived_at__isnull=True,
            placement__folder__isnull=True,
        )
    ).order_by("-updated_at", "-id")
    archived_qs = listed.filter(placement__archived_at__isnull=False).order_by("-placement__archived_at")
    return Sidebar(
        pinned=pinned,
        folders=list(groups.values()),
        recent=Paginator(rest, PAGE_SIZE).get_page(page),
        archived=list(archived_qs[:ARCHIVED_SHOWN]),
        archived_count=archived_qs.count(),
    )


def highlight(text: str, terms: list[str]) -> SafeString:
    """`text` escaped, with each occurrence of a term wrapped in <mark>."""
    if not terms:
        return escape(text)
    pattern = re.compile("|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True)), re.IGNORECASE)
    out, last = [], 0
    for match in pattern.finditer(text):
        out += [escape(text[last : match.start()]), "<mark>", escape(match.group(0)), "</mark>"]
        last = match.end()
    out.append(escape(text[last:]))
    return mark_safe("".join(out))  # every piece of user text went through escape()


def marked_snippet(snippet: str) -> SafeString:
    """A database snippet (markers around matches) as escaped HTML with <mark> elements."""
    starts, ends = snippet.count(fulltext.MARK_START), snippet.count(fulltext.MARK_END)
    text = " ".join(escape(snippet).split())
    if starts != ends:  # The message itself held a marker character: show it plain rather than unbalanced.
        return mark_safe(text.replace(fulltext.MARK_START, "").replace(fulltext.MARK_END, ""))
    return mark_safe(text.replace(fulltext.MARK_START, "<mark>").replace(fulltext.MARK_END, "</mark>"))


def search_conversations(
    *, user: User, query: str, include_archived: bool = True, limit: int = SEARCH_LIMIT
) -> list[SearchHit]:
    """The user's chats whose messages or title hold every word of `query`, best first: title matches,
    then by full-text rank. Operators and quotes in `query` are searched as text, never as syntax."""
    terms = fulltext.query_terms(query)
    if not terms:
        return []
    best: dict[int, fulltext.MessageMatch] = {}
    for found in fulltext.message_matches(user_id=user.pk, terms=terms):
        best.setdefault(found.conversation_id, found)
    # Titles are short: they match the typed phrase as it stands, as the chat's own search always did.
    phrase = " ".join(query[: fulltext.MAX_QUERY_CHARS].split())
    title_ids = set(_listed(user).filter(title__icontains=phrase).values_list("pk", flat=True)[:200])
    chats = _listed(user).filter(pk__in=set(best) | title_ids)
    if not include_archived:
        chats = chats.exclude(placement__archived_at__isnull=False)
    hits = []
    for chat in chats:
        match = best.get(chat.pk)
        placement = getattr(chat, "placement", None)
        hits.append(
            SearchHit(
                conversation=chat,
                title_html=highlight(chat.title, [phrase] if chat.pk in title_ids else terms),
                snippet_html=marked_snippet(match.snippet) if match else mark_safe(""),
                archived=bool(placement and placement.archived_at),
                score=(match.score if match else 0.0) + (1000.0 if chat.pk in title_ids else 0.0),
            )
        )
    hits.sort(key=lambda h: (h.score, h.conversation.updated_at), reverse=True)
    return hits[:limit]


def feedback_by_message(*, message_ids: list[int]) -> dict[int, Feedback]:
    return {f.message_id: f for f in Feedback.objects.filter(message_id__in=message_ids)}


def feedback_page(*, rating: str = "", model: str = "", page: int | str | None = 1) -> Page[Feedback]:
    qs = Feedback.objects.select_related("user", "message", "message__conversation")
    if rating:
        qs = qs.filter(rating=rating)
    if model:
        qs = qs.filter(model=model)
    return Paginator(qs.order_by("-updated_at", "-id"), FEEDBACK_PAGE_SIZE).get_page(page)


@dataclass(frozen=True, slots=True)
class ModelFeedback:
    model: str
    up: int
    down: int
    shared: int  # ratings on chats whose owner shares them (a link is live)


def feedback_per_model(*, since: dt.datetime | None = None) -> list[ModelFeedback]:
    """Thumbs up and down per model, the most rated first (the console's Usage page)."""
    rows = Feedback.objects.all() if since is None else Feedback.objects.filter(created_at__gte=since)
    live_share = Share.objects.filter(conversation=OuterRef("message__conversation"), revoked_at__isnull=True)
    counted = rows.values("model").annotate(
        up=Count("pk", filter=Q(rating=Feedback.Rating.UP)),
        down=Count("pk", filter=Q(rating=Feedback.Rating.DOWN)),
        shared=Count("pk", filter=Exists(live_share)),
    )
    result = [ModelFeedback(r["model"], r["up"], r["down"], r["shared"]) for r in counted]
    return sorted(result, key=lambda f: (-(f.up + f.down), f.model))


def feedback_models() -> list[str]:
    return list(Feedback.objects.order_by("model").values_list("model", flat=True).distinct())


def rated_exchanges_for_staff(
    *, conversation_id: int
) -> tuple[Conversation, list[tuple[Message, Feedback | None]]]:
    """A chat someone rated, for the console's read-only view: each rated reply and the messages that led
    to it, in order, each with its feedback; nothing after the rated replies, and no chat without
    feedback (404: feedback is what lets an admin read a chat, not their role)."""
    conversation = Conversation.objects.filter(pk=conversation_id).select_related("user").first()
    rated = list(
        Message.objects.filter(conversation_id=conversation_id, feedback__isnull=False).order_by("id")
    )
    if conversation is None or not rated:
        raise Http404("No rated chat here")
    shown: dict[int, Message] = {}
    for reply in rated:
        shown.update((m.pk, m) for m in chat_selectors.path_to(message=reply))
    messages = [shown[pk] for pk in sorted(shown)]
    feedback = feedback_by_message(message_ids=list(shown))
    return conversation, [(message, feedback.get(message.pk)) for message in messages]
