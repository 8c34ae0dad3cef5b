"""Writes for organising chats, sharing them and rating replies; callers pass objects already scoped to
their owner (selectors.*_get), so nothing here can reach another user's rows."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.chat.models import Conversation, Message
from webapp.core.errors import InvalidRequest
from webapp.organize.models import FEEDBACK_COMMENT_MAX, FOLDER_NAME_MAX, Feedback, Folder, Placement, Share

MAX_FOLDERS = 200
MAX_ACTIVE_SHARES = 20
SHARE_PREFIX_LEN = 8


def hash_token(token: str) -> str:
    """32 random bytes make brute force pointless, so a fast hash is enough (as for API keys)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _clean_name(name: str) -> str:
    name = " ".join(name.split())
    if not name:
        raise InvalidRequest("A folder needs a name.", param="name")
    if len(name) > FOLDER_NAME_MAX:
        raise InvalidRequest(f"Folder names are at most {FOLDER_NAME_MAX} characters.", param="name")
    return name


def folder_create(*, user: User, name: str) -> Folder:
    name = _clean_name(name)
    if Folder.objects.filter(user=user).count() >= MAX_FOLDERS:
        raise InvalidRequest(f"You can have at most {MAX_FOLDERS} folders.", param="name")
    try:
        with transaction.atomic():
            return Folder.objects.create(user=user, name=name)
    except IntegrityError:
        raise InvalidRequest(f"You already have a folder called “{name}”.", param="name") from None


def folder_rename(*, folder: Folder, name: str) -> Folder:
    name = _clean_name(name)
    if Folder.objects.filter(user_id=folder.user_id, name=name).exclude(pk=folder.pk).exists():
        raise InvalidRequest(f"You already have a folder called “{name}”.", param="name")
    folder.name = name
    folder.save(update_fields=["name"])
    return folder


def folder_delete(*, folder: Folder) -> None:
    """The folder goes; its chats stay, back in the main list (the foreign key is SET_NULL)."""
    folder.delete()


def _placement(conversation: Conversation) -> Placement:
    placement, _ = Placement.objects.get_or_create(conversation=conversation)
    return placement


def conversation_pin(*, conversation: Conversation, pinned: bool) -> Placement:
    placement = _placement(conversation)
    placement.pinned_at = timezone.now() if pinned else None
    placement.save(update_fields=["pinned_at"])
    return placement


def conversation_archive(*, conversation: Conversation, archived: bool) -> Placement:
    """Archiving also unpins: an archived chat is out of the list, pinned or not."""
    placement = _placement(conversation)
    placement.archived_at = timezone.now() if archived else None
    if archived:
        placement.pinned_at = None
    placement.save(update_fields=["archived_at", "pinned_at"])
    return placement


def conversation_move(*, conversation: Conversation, folder: Folder | None) -> Placement:
    if folder is not None and folder.user_id != conversation.user_id:
        raise InvalidRequest("No such folder.", param="folder")  # Callers scope it; this is a backstop.
    placement = _placement(conversation)
    placement.folder = folder
    placement.save(update_fields=["folder"])
    return placement


def share_create(*, conversation: Conversation) -> tuple[Share, str]:
    """A new link's row and its token; the token is not stored and cannot be shown again."""
    if Share.objects.filter(conversation=conversation, revoked_at__isnull=True).count() >= MAX_ACTIVE_SHARES:
        raise InvalidRequest(f"A chat can have at most {MAX_ACTIVE_SHARES} active links; revoke one first.")
    token = secrets.token_urlsafe(32)
    share = Share.objects.create(
        conversation=conversation, token_hash=hash_token(token), prefix=token[:SHARE_PREFIX_LEN]
    )
    return share, token


def share_revoke(*, share: Share) -> None:
    if share.revoked_at is None:
        share.revoked_at = timezone.now()
        share.save(update_fields=["revoked_at"])


@transaction.atomic
def share_continue(*, share: Share, user: User) -> Conversation:
    """A new chat of `user` that holds the shared thread as it reads on the shared page, to go on with.

    Only what the page shows is copied: the thread's messages, in order. The owner's system prompt, other
    versions, documents and ratings stay theirs; the new chat takes the viewer's own defaults."""
    # Function-local: chat's services reach preferences, which reach organize's models at import.
    from webapp.chat import selectors as chat_selectors
    from webapp.chat import services as chat_services

    thread = [
        m
        for m in chat_selectors.conversation_messages(conversation=share.conversation)
        if m.content.strip() and m.status != Message.Status.ERROR
    ]
    if not thread:
        raise InvalidRequest("This chat has no messages to continue from.", code="invalid")
    conversation = chat_services.conversation_create(user=user, title=share.conversation.title)
    conversation.title_is_custom = True  # the shared chat's title, not one to write anew
    conversation.save(update_fields=["title_is_custom"])
    parent: Message | None = None
    for source in thread:
        copy = Message(
            conversation=conversation,
            parent=parent,
            role=source.role,
            content=source.content,
            # A reply still streaming on the owner's side is copied as far as it got.
            status=Message.Status.STOPPED if source.status == Message.Status.STREAMING else source.status,
            finish_reason=source.finish_reason,
            model=source.model,
            prompt_tokens=source.prompt_tokens,
            completion_tokens=source.completion_tokens,
            temperature=source.temperature,
            top_p=source.top_p,
            max_tokens=source.max_tokens,
        )
        copy.new_root = parent is None
        copy.save()
        parent = copy
    return conversation


def feedback_set(*, user: User, message: Message, rating: str, comment: str | None) -> Feedback | None:
    """Rate a reply; the same rating again with no comment takes it back (returns None).

    `comment` None keeps the stored comment, so a thumb click never wipes what was written.
    """
    if message.role != Message.Role.ASSISTANT or message.conversation.user_id != user.pk:
        raise InvalidRequest("Only your own chat's replies can be rated.")
    if message.status == Message.Status.STREAMING:
        raise InvalidRequest("Wait for the reply to finish before rating it.")
    if rating not in Feedback.Rating.values:
        raise InvalidRequest("Choose thumbs up or thumbs down.", param="rating")
    if comment is not None:
        comment = comment.strip()
        if len(comment) > FEEDBACK_COMMENT_MAX:
            raise InvalidRequest(f"Comments are at most {FEEDBACK_COMMENT_MAX} characters.", param="comment")
    existing = Feedback.objects.filter(message=message).first()
    if existing is not None and comment is None and existing.rating == rating:
        existing.delete()
        return None
    if existing is None:
        return Feedback.objects.create(
            message=message, user=user, rating=rating, comment=comment or "", model=message.model
        )
    existing.rating = rating
    if comment is not None:
        existing.comment = comment
    existing.save(update_fields=["rating", "comment", "updated_at"])
    return existing
