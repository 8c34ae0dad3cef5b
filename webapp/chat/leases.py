"""Which replica runs a chat's reply: a lease on the conversation row, taken atomically and renewed.

Every replica reads "a reply is running" from the lease, so a second send is refused on all of them, and
a page load anywhere does not take a live reply for a dead one. The replica running the reply renews the
lease every RENEW_S; if it dies, the lease lapses after LEASE_S, the reply left streaming reads as
interrupted (with its text so far) and the chat can be used again from any replica.

Stop pressed on another replica is also written here (reply_stop_request): the replica running the reply
reads it when it saves progress and when it renews, so a stop lost by the channel layer still lands.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from webapp.chat.models import Conversation, Message

LEASE_S: float = settings.MOONCAKE_CHAT_REPLY_LEASE_SECONDS
RENEW_S = LEASE_S / 6


def _until() -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=LEASE_S)


def reply_lease_take(*, conversation_id: int) -> dt.datetime | None:
    """Take the chat's lease if nobody holds a live one: the lease's end when this caller now holds it,
    else None.

    One conditional UPDATE, so two replicas racing for it cannot both win. A lapsed holder's reply still
    marked streaming is closed as interrupted first, in the same transaction.
    """
    now, until = timezone.now(), _until()
    with transaction.atomic():
        taken = (
            Conversation.objects.filter(pk=conversation_id)
            .filter(Q(reply_lease_until__isnull=True) | Q(reply_lease_until__lte=now))
            .update(reply_lease_until=until, reply_stop_requested=False)
        )
        if taken:
            Message.objects.filter(conversation_id=conversation_id, status=Message.Status.STREAMING).update(
                status=Message.Status.STOPPED, finish_reason="interrupted"
            )
    return until if taken else None


def reply_leases_renew(*, conversation_ids: list[int]) -> list[int]:
    """Renew the leases; returns those of the chats whose reply was asked to stop from elsewhere."""
    if not conversation_ids:
        return []
    held = Conversation.objects.filter(pk__in=conversation_ids)
    held.update(reply_lease_until=_until())
    return sorted(held.filter(reply_stop_requested=True).values_list("pk", flat=True))


def reply_lease_release(*, conversation_id: int) -> None:
    Conversation.objects.filter(pk=conversation_id).update(reply_lease_until=None, reply_stop_requested=False)


def reply_stop_request(*, conversation_id: int) -> bool:
    """Ask, through the row, that the chat's running reply stop; False when no reply is running."""
    return bool(
        Conversation.objects.filter(pk=conversation_id, reply_lease_until__gt=timezone.now()).update(
            reply_stop_requested=True
        )
    )


def reply_stop_requested(*, conversation_id: int) -> bool:
    return Conversation.objects.filter(pk=conversation_id, reply_stop_requested=True).exists()


def reply_is_live(conversation: Conversation) -> bool:
    """Whether some replica is running this chat's reply (as of the row `conversation` was read from)."""
    until = conversation.reply_lease_until
    return until is not None and until > timezone.now()
