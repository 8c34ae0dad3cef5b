"""Which replica runs a chat's reply: a lease on the conversation row, taken atomically and renewed.

Every replica reads "a reply is running" from the lease, so a second send is refused on all of them, and
a page load anywhere does not take a live reply for a dead one. The replica running the reply renews the
lease every RENEW_S; if it dies, the lease lapses after LEASE_S, the reply left streaming reads as
interrupted (with its text so far) and the chat can be used again from any replica.
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


def reply_lease_take(*, conversation_id: int) -> bool:
    """Take the chat's lease if nobody holds a live one; True when this caller now holds it.

    One conditional UPDATE, so two replicas racing for it cannot both win. A lapsed holder's reply still
    marked streaming is closed as interrupted first, in the same transaction.
    """
    now = timezone.now()
    with transaction.atomic():
        taken = (
            Conversation.objects.filter(pk=conversation_id)
            .filter(Q(reply_lease_until__isnull=True) | Q(reply_lease_until__lte=now))
            .update(reply_lease_until=_until())
        )
        if taken:
            Message.objects.filter(conversation_id=conversation_id, status=Message.Status.STREAMING).update(
                status=Message.Status.STOPPED, finish_reason="interrupted"
            )
    return bool(taken)


def reply_leases_renew(*, conversation_ids: list[int]) -> None:
    if conversation_ids:
        Conversation.objects.filter(pk__in=conversation_ids).update(reply_lease_until=_until())


def reply_lease_release(*, conversation_id: int) -> None:
    Conversation.objects.filter(pk=conversation_id).update(reply_lease_until=None)


def reply_is_live(conversation: Conversation) -> bool:
    """Whether some replica is running this chat's reply (as of the row `conversation` was read from)."""
    until = conversation.reply_lease_until
    return until is not None and until > timezone.now()
