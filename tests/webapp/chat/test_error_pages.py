"""403, 404 and 500 are pages in the site's layout with a way back, never a bare status line."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.template.loader import get_template
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.fixture
def plain(client: Client) -> User:
    user = User.objects.create_user("plain", password="pw")
    client.force_login(user)
    return user


def test_console_refuses_a_plain_user_with_the_designed_403(client: Client, plain: User) -> None:
    response = client.get("/console/", follow=True)
    html = response.content.decode()
    assert response.status_code == 403
    assert 'class="topbar"' in html and "mooncake.css" in html
    assert "The console is for admins." in html
    assert 'href="/chat/"' in html


def test_unknown_url_is_the_designed_404(client: Client, plain: User) -> None:
    response = client.get("/no-such-page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert 'class="topbar"' in html and "mooncake.css" in html
    assert 'href="/chat/"' in html


def test_500_renders_without_a_request_or_context() -> None:
    # Django renders it with an empty context, no request, no context processors.
    html = get_template("500.html").render()
    assert 'class="topbar"' in html and "mooncake.css" in html
    assert 'href="/"' in html and "went wrong" in html
