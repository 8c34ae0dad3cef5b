"""Console state that must outlive the process: the audit trail, jobs, and what each replica reports."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditLog(models.Model):
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="console_audit"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    target = models.CharField(max_length=200, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.action} {self.target}"


class ConsoleJob(models.Model):
    """A Celery job started from the console (model import); the worker updates state and progress."""

    class State(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"

    kind = models.CharField(max_length=32)
    target = models.CharField(max_length=300)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    progress = models.FloatField(default=0.0)  # 0..1
    # Of the file being downloaded (hf_download): bytes so far and in all (None: not known yet).
    bytes_done = models.BigIntegerField(null=True, blank=True)
    bytes_total = models.BigIntegerField(null=True, blank=True)
    message = models.TextField(blank=True)
    celery_id = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="console_jobs"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in (self.State.PENDING, self.State.RUNNING)


class Replica(models.Model):
    """A web replica's heartbeat: its models' states and its latest dashboard sample (console.replication).

    A row not refreshed for a few heartbeats is a replica that stopped; the console shows it as gone.
    """

    name = models.CharField(max_length=200, unique=True)
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField(db_index=True)
    model_states = models.JSONField(default=list, blank=True)  # [{"name", "state", "error"}]
    sample = models.JSONField(null=True, blank=True)  # console.dashboard.Sample as a dict

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
