"""The site's frame (templates/base.html, issue #47): the footer's metrics link is for staff only, and there
is a favicon, at /favicon.ico too."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.test import Client

METRICS_LINK = '<a href="/metrics">metrics</a>'


def test_visitors_and_users_see_no_metrics_link(client: Client, db: None) -> None:
    User.objects.create_user("owner", password="owner-password-1", is_staff=True)  # setup is done
    page = client.get("/login/").content.decode()
    assert '<footer class="footer">' in page and METRICS_LINK not in page

    client.force_login(User.objects.create_user("pat", password="pat-password-1"))
    assert METRICS_LINK not in client.get("/no-such-page/").content.decode()


def test_staff_see_the_metrics_link(client: Client, db: None) -> None:
    client.force_login(User.objects.create_user("root", password="root-password-1", is_staff=True))
    assert METRICS_LINK in client.get("/no-such-page/").content.decode()


def test_pages_name_the_favicon_and_favicon_ico_finds_it(client: Client, db: None) -> None:
    User.objects.create_user("owner", password="owner-password-1", is_staff=True)
    page = client.get("/login/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    found = finders.find("favicon.svg")
    assert found and "<svg" in Path(found).read_text(encoding="utf-8")  # served by the ASGI app (test_static)


def test_favicon_ico_is_not_sent_to_setup_before_the_first_account(client: Client, db: None) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
