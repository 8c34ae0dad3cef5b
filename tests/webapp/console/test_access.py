"""Every console URL: anonymous users go to login, non-staff users get 403, CSRF is enforced."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import URLPattern, reverse

from webapp.console.urls import urlpatterns

KWARGS = {"name": "base", "pk": 1, "field": "active", "user_pk": 1}
NAMES = [p.name for p in urlpatterns if isinstance(p, URLPattern) and p.name]
# Views that change state; everything else is a page or a poll.
POST_NAMES = [
    n
    for n in NAMES
    if n
    not in {
        "index",
        "models",
        "models-table",
        "dashboard",
        "dashboard-data",
        "requests",
        "user",
        "jobs",
        "audit",
        "group",
        "usage",
    }
]


def url_for(name: str) -> str:
    pattern = next(p for p in urlpatterns if isinstance(p, URLPattern) and p.name == name)
    wanted = {k: v for k, v in KWARGS.items() if k in pattern.pattern.regex.groupindex}
    return reverse(f"console:{name}", kwargs=wanted)


def test_every_url_is_covered() -> None:
    assert len(NAMES) == len(urlpatterns) >= 20


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_is_sent_to_login(name: str, method: str, plain: User, manager: Any) -> None:
    response = getattr(Client(), method)(url_for(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("core:login"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("method", ["get", "post"])
def test_non_staff_is_forbidden(name: str, method: str, plain: User, manager: Any) -> None:
    client = Client()
    client.force_login(plain)
    response = getattr(client, method)(url_for(name))
    assert response.status_code == 403


def test_inactive_staff_is_refused(db: None, manager: Any) -> None:
    user = User.objects.create_user("gone", password="x-password-1", is_staff=True, is_active=False)
    client = Client()
    client.force_login(user)
    assert client.get(url_for("models")).status_code in (302, 403)


@pytest.mark.parametrize("name", POST_NAMES)
def test_csrf_is_enforced_on_every_post(name: str, staff: User, manager: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    response = client.post(url_for(name), {})
    assert response.status_code == 403
    assert b"CSRF" in response.content


@pytest.mark.database
def test_post_with_a_csrf_token_passes(staff: User, manager: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff)
    page = client.get(url_for("tuning"))
    token = page.cookies["csrftoken"].value
    response = client.post(url_for("model-default"), {}, headers={"X-CSRFToken": token})
    assert response.status_code in (200, 302)


@pytest.mark.database
@pytest.mark.parametrize(
    "name",
    [
        "models",
        "models-table",
        "tuning",
        "dashboard",
        "dashboard-data",
        "requests",
        "users",
        "jobs",
        "audit",
        "groups",
        "usage",
        "site",
    ],
)
def test_staff_can_open_every_page(name: str, staff_client: Client, manager: Any) -> None:
    response = staff_client.get(url_for(name))
    assert response.status_code == 200, response.content[:500]
