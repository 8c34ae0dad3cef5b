"""Template context every page needs: the app version for the footer, and the site's banner."""

from __future__ import annotations

from django.http import HttpRequest

from webapp.core.site import banner_for
from webapp.core.version import app_version


def mooncake(request: HttpRequest) -> dict[str, object]:
    return {"mooncake_version": app_version(), "site_banner": banner_for(request)}
