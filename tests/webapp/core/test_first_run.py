"""First run: with no account every page leads to /setup/, which creates the admin and then disappears."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

pytestmark = pytest.mark.django_db

PASSWORD = "moon-cake-42!"
GOOD = {"username": "admin", "email": "admin@example.com", "password1": PASSWORD, "password2": PASSWORD}


@pytest.mark.parametrize("path", ["/", "/login/", "/admin/", "/chat/", "/console/"])
def test_pages_redirect_to_setup_while_no_account_exists(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 302
    assert response["Location"] == "/setup/"


@pytest.mark.parametrize("path", ["/health", "/version", "/metrics", "/static/css/mooncake.css"])
def test_machine_endpoints_are_not_redirected(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code != 302


def test_setup_page_renders_the_form(client: Client) -> None:
    response = client.get("/setup/")
    assert response.status_code == 200
    assert b"Create account" in response.content
    assert b'name="password2"' in response.content


@pytest.mark.database
def test_setup_creates_a_logged_in_superuser(client: Client) -> None:
    response = client.post("/setup/", GOOD)
    assert response.status_code == 302
    assert response["Location"] == "/"
    user = User.objects.get()
    assert (user.username, user.is_staff, user.is_superuser) == ("admin", True, True)
    assert user.check_password("moon-cake-42!")
    assert client.session["_auth_user_id"] == str(user.pk)


@pytest.mark.database
def test_setup_is_gone_once_an_account_exists(client: Client) -> None:
    client.post("/setup/", GOOD)
    assert client.get("/setup/").status_code == 404
    assert Client().post("/setup/", GOOD | {"username": "intruder"}).status_code == 404
    assert list(User.objects.values_list("username", flat=True)) == ["admin"]


def test_after_setup_pages_no_longer_redirect_to_setup(client: Client) -> None:
    User.objects.create_user("someone", password="x")
    response = Client().get("/login/")
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"password2": "something-else-42!"}, "password2"),
        ({"password1": "123", "password2": "123"}, "password1"),
    ],
)
def test_setup_rejects_bad_passwords(client: Client, change: dict[str, str], field: str) -> None:
    response = client.post("/setup/", GOOD | change)
    assert response.status_code == 200
    assert field in response.context["form"].errors
    assert not User.objects.exists()


def test_login_and_logout(client: Client) -> None:
    User.objects.create_user("alice", password="wonderland-42")
    page = client.get("/login/")
    assert page.status_code == 200
    assert b'name="username"' in page.content

    bad = client.post("/login/", {"username": "alice", "password": "nope"})
    assert bad.status_code == 200
    assert "_auth_user_id" not in client.session

    good = client.post("/login/", {"username": "alice", "password": "wonderland-42"})
    assert good.status_code == 302
    assert "_auth_user_id" in client.session

    out = client.post("/logout/")
    assert out.status_code == 302
    assert "_auth_user_id" not in client.session


def test_base_layout_has_navigation_and_local_assets_only(client: Client) -> None:
    User.objects.create_user("bob", password="builder-42")
    html = client.get("/login/").content.decode()
    needles = ('href="/chat/"', 'href="/v1/docs"', "/static/vendor/htmx.min.js", "/static/css/mooncake.css")
    for needle in needles:
        assert needle in html
    assert 'id="theme-toggle"' in html
    assert "https://" not in html and "http://" not in html  # no CDN
