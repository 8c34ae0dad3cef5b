"""Mooncake's Django project. Importing it creates the Celery app so `shared_task`s bind to it."""

from webapp.celery import app as celery_app

__all__ = ["celery_app"]
