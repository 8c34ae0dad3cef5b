"""Template context every page needs: the app version for the footer."""

from __future__ import annotations

from django.http import HttpRequest

from webapp.core.version import app_version


def mooncake(request: HttpRequest) -> dict[str, str]:
    return {"mooncake_version": app_version()}
