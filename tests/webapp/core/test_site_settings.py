"""Site-wide settings: the banner every signed-in user sees until they dismiss it (and sees again when it
changes), set on the console's Site page, audited; the dismissal never redirects off the site."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.console.models import AuditLog
from webapp.core.models import SiteSettings
from webapp.core.site import BANNER_COOKIE, site_settings

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("boss", is_staff=True))
    return client


@pytest.fixture
def user_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("reader"))
    return client


def _save(client: Client, text: str, level: str = "info", prompt: str = "") -> None:
    body = {"banner_text": text, "banner_level": level, "default_system_prompt": prompt}
    assert client.post("/console/site/", body).status_code == 302


@pytest.mark.database
def test_the_banner_shows_until_dismissed_and_again_when_it_changes(
    admin_client: Client, user_client: Client
) -> None:
    _save(admin_client, "Maintenance at 18:00 UTC", "warning", prompt="Be brief.")
    page = user_client.get("/chat/").content.decode()
    assert "Maintenance at 18:00 UTC" in page and 'role="alert"' in page
    revision = site_settings().banner_revision
    response = user_client.post("/banner/dismiss/", {"revision": str(revision), "next": "/chat/"})
    assert response.status_code == 302 and response["Location"] == "/chat/"
    assert response.cookies[BANNER_COOKIE]["httponly"]
    assert "Maintenance at 18:00 UTC" not in user_client.get("/chat/").content.decode()
    _save(admin_client, "Maintenance moved to 20:00 UTC")
    page = user_client.get("/chat/").content.decode()
    assert "Maintenance moved to 20:00 UTC" in page and 'role="status"' in page
    assert site_settings().default_system_prompt == ""
    audits = AuditLog.objects.filter(action="site.settings").order_by("pk")
    assert [a.after["banner_revision"] for a in audits] == [1, 2]


@pytest.mark.database
def test_saving_the_same_banner_keeps_its_dismissal(admin_client: Client, user_client: Client) -> None:
    _save(admin_client, "Hello")
    user_client.post("/banner/dismiss/", {"revision": "1", "next": "/chat/"})
    _save(admin_client, "Hello", prompt="Answer in French.")
    assert SiteSettings.objects.get().banner_revision == 1
    assert SiteSettings.objects.get().default_system_prompt == "Answer in French."
    assert "Hello" not in user_client.get("/chat/").content.decode()


@pytest.mark.database
def test_no_banner_for_anonymous_visitors_or_when_empty(admin_client: Client, user_client: Client) -> None:
    assert 'id="site-banner"' not in user_client.get("/chat/").content.decode()
    _save(admin_client, "Only for members")
    assert "Only for members" not in Client().get("/login/").content.decode()


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/x", "javascript:alert(1)"])
def test_dismissal_never_leaves_the_site(user_client: Client, target: str) -> None:
    response = user_client.post("/banner/dismiss/", {"revision": "1", "next": target})
    assert response.status_code == 302 and response["Location"] == "/"


@pytest.mark.database
def test_bad_input_is_refused_inline(admin_client: Client) -> None:
    response = admin_client.post("/console/site/", {"banner_text": "x" * 501, "banner_level": "loud"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "at most 500 characters" in body and "Select a valid choice" in body
    assert SiteSettings.objects.filter(banner_text__startswith="x").count() == 0


@pytest.mark.database
def test_new_chats_start_with_the_site_prompt_unless_the_user_has_their_own(admin_client: Client) -> None:
    from webapp.chat.services import conversation_create
    from webapp.preferences.services import defaults_update

    _save(admin_client, "", prompt="You are the ACME assistant.")
    plain = User.objects.create_user("plain")
    assert conversation_create(user=plain).system_prompt == "You are the ACME assistant."
    own = User.objects.create_user("own")
    defaults_update(
        user=own, model="", system_prompt="Be terse.", temperature=None, top_p=None, max_tokens=None
    )
    assert conversation_create(user=own).system_prompt == "Be terse."
