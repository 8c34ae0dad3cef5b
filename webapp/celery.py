"""The Celery app, configured from Django settings (CELERY_* names). Workers run I/O jobs, never models."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

app = Celery("mooncake")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
