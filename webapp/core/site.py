"""Site-wide settings: the default system prompt of new chats, and a banner every user sees until they
dismiss it (a cookie per browser remembers the banner revision dismissed)."""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import SynchronousOnlyOperation
from django.http import HttpRequest

from webapp.core.models import SiteSettings

BANNER_COOKIE = "mooncake_banner_dismissed"


def site_settings() -> SiteSettings:
    return SiteSettings.objects.get_or_create(pk=SiteSettings.SINGLETON)[0]


def site_settings_update(
    *, default_system_prompt: str, banner_text: str, banner_level: str, user_api_keys: bool = False
) -> tuple[dict[str, object], dict[str, object]]:
    """Save the settings; a changed banner gets a new revision, so those who dismissed the old one see it.
    Returns the values before and after, for the audit log."""
    row = site_settings()
    before = _snapshot(row)
    banner_changed = (row.banner_text, row.banner_level) != (banner_text.strip(), banner_level)
    row.default_system_prompt = default_system_prompt.strip()
    row.banner_text, row.banner_level = banner_text.strip(), banner_level
    if banner_changed:
        row.banner_revision += 1
    row.user_api_keys = user_api_keys
    row.save()
    return before, _snapshot(row)


def _snapshot(row: SiteSettings) -> dict[str, object]:
    return {
        "default_system_prompt": row.default_system_prompt,
        "banner_text": row.banner_text,
        "banner_level": row.banner_level,
        "banner_revision": row.banner_revision,
        "user_api_keys": row.user_api_keys,
    }


@dataclass(frozen=True, slots=True)
class Banner:
    text: str
    level: str
    revision: int


def banner_for(request: HttpRequest) -> Banner | None:
    """The banner to show on this page: for signed-in users, unless this browser dismissed this revision."""
    user = getattr(request, "user", None)  # requests that skipped the middleware (static files) have none
    try:
        if user is None or not user.is_authenticated:
            return None
        row = SiteSettings.objects.filter(pk=SiteSettings.SINGLETON).first()
    except SynchronousOnlyOperation:  # a page rendered inside the event loop: no banner rather than a 500
        return None
    if row is None or not row.banner_text:
        return None
    if request.COOKIES.get(BANNER_COOKIE) == str(row.banner_revision):
        return None
    return Banner(row.banner_text, row.banner_level, row.banner_revision)
