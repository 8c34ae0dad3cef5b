"""Rows the core app owns: the lock that serializes first-run setup."""

from __future__ import annotations

from django.db import models


class SetupLock(models.Model):
    """One row, made by the migration. First-run setup updates it before anything else, so two setups
    racing queue on its row lock (PostgreSQL) or on the write lock (SQLite): the second then finds the
    first one's account and gives up."""

    SINGLETON = 1

    id = models.PositiveSmallIntegerField(primary_key=True)
    last_taken = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"setup lock (last taken {self.last_taken})"
