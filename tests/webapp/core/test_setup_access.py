"""First-run setup from elsewhere than the server itself needs the token from the log; racing setups make
exactly one administrator."""

from __future__ import annotations

import logging
import threading

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.core.services import SetupAlreadyDoneError, first_admin_create
from webapp.core.setup_access import setup_token

PASSWORD = "moon-cake-42!"
GOOD = {"username": "admin", "email": "admin@example.com", "password1": PASSWORD, "password2": PASSWORD}
REMOTE = {"REMOTE_ADDR": "203.0.113.7"}


@pytest.mark.django_db
def test_a_remote_visitor_without_the_token_is_refused_and_the_link_is_logged(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="webapp.core.setup_access"):
        page = client.get("/setup/", **REMOTE)
    assert page.status_code == 403 and b"server log" in page.content
    assert setup_token() not in page.content.decode()
    assert f"/setup/?token={setup_token()}" in caplog.text
    assert client.post("/setup/", GOOD, **REMOTE).status_code == 403
    assert client.post("/setup/", GOOD | {"token": "0" * 32}, **REMOTE).status_code == 403
    assert not User.objects.exists()


@pytest.mark.django_db
def test_loopback_through_a_proxy_is_not_the_server_itself(client: Client) -> None:
    proxied = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "198.51.100.4"}
    assert client.get("/setup/", **proxied).status_code == 403
    assert client.post("/setup/", GOOD, **proxied).status_code == 403
    assert not User.objects.exists()


@pytest.mark.database
@pytest.mark.django_db
def test_the_token_link_lets_a_remote_operator_create_the_admin(client: Client) -> None:
    token = setup_token()
    page = client.get(f"/setup/?token={token}", **REMOTE)
    assert page.status_code == 200 and f'value="{token}"' in page.content.decode()
    response = client.post("/setup/", GOOD | {"token": token}, **REMOTE)
    assert response.status_code == 302
    assert User.objects.get().is_superuser
    assert client.get(f"/setup/?token={token}", **REMOTE).status_code == 404


@pytest.mark.database
@pytest.mark.django_db
def test_the_server_itself_needs_no_token(client: Client) -> None:
    assert client.get("/setup/", REMOTE_ADDR="::1").status_code == 200
    assert client.post("/setup/", GOOD, REMOTE_ADDR="127.0.0.1").status_code == 302


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_racing_setups_make_exactly_one_administrator() -> None:
    start = threading.Barrier(4)
    outcomes: list[str] = []

    def attempt(i: int) -> None:
        start.wait()
        try:
            first_admin_create(username=f"admin{i}", email="", password=PASSWORD)
            outcomes.append("created")
        except SetupAlreadyDoneError:
            outcomes.append("refused")
        finally:
            from django.db import connection

            connection.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(outcomes) == ["created", "refused", "refused", "refused"]
    assert User.objects.count() == 1
