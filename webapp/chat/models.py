"""Conversations and their messages, one row per message so partial replies can be saved as they stream.

The messages form a tree: regenerating or editing adds a sibling instead of replacing, and each message
remembers which of its children is shown (the chat's `active_root` for the first level). The chat on
screen, and the prompt, is the path from the active root down the active children.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


@dataclass(frozen=True, slots=True)
class Branch:
    """Where a message sits among its siblings (its other versions): "index/count" on screen."""

    index: int = 1
    count: int = 1
    prev_id: int | None = None
    next_id: int | None = None


class Conversation(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations")
    title = models.CharField(max_length=200, default="New chat")
    # Once the user renames a chat, the background title job must not overwrite it.
    title_is_custom = models.BooleanField(default=False)
    system_prompt = models.TextField(blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")  # "" = the server's default model
    temperature = models.FloatField(default=0.7)
    top_p = models.FloatField(default=1.0)
    max_tokens = models.PositiveIntegerField(default=512)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # While a reply is generating, the replica running it holds this lease and renews it: every replica
    # reads "a reply is running" from here, and a replica that dies lets it lapse.
    reply_lease_until = models.DateTimeField(null=True, blank=True)
    # Stop pressed on a replica that does not run the reply. The channel layer carries the stop at once but
    # delivers at most once; the replica running the reply also reads this while it saves and renews.
    reply_stop_requested = models.BooleanField(default=False)
    # The first message of the branch on screen (None: the newest first message).
    active_root = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["user", "-updated_at"])]

    def __str__(self) -> str:
        return self.title


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    class Status(models.TextChoices):
        STREAMING = "streaming"
        COMPLETE = "complete"
        STOPPED = "stopped"
        ERROR = "error"

    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="messages")
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    # The child shown below this message (None: its newest child).
    active_child = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField(blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.COMPLETE)
    finish_reason = models.CharField(max_length=32, blank=True, default="")
    error = models.TextField(blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    tokens_per_second = models.FloatField(null=True, blank=True)
    # The sampling settings a reply was written with (None on user messages and older replies).
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField(null=True, blank=True)
    # A default rather than auto_now_add, so an import keeps the exported times.
    created_at = models.DateTimeField(default=timezone.now)

    # Set by the selectors that read a chat's thread; a bare row is its only version, with no children.
    branch: Branch = Branch()
    is_leaf: bool = True
    new_root: bool = False  # set by the services on a first message (or a new version of one)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:40]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # A row created without a parent (a shell script, a fixture, code written before the tree)
        # continues its chat, as a linear chat's next message would; services mark real roots themselves.
        if (
            self._state.adding
            and self.parent_id is None
            and not self.new_root
            and self.conversation_id is not None
        ):
            self.parent = Message.objects.filter(conversation_id=self.conversation_id).order_by("-id").first()
        super().save(*args, **kwargs)
