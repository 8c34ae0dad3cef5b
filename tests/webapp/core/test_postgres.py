"""Checks that only mean something on PostgreSQL (MOONCAKE_TEST_DATABASE=postgres): row locks instead of
SQLite's one writer, so racing first-run setups really run side by side."""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from webapp.core.models import SetupLock

PASSWORD = "moon-cake-42!"
RACERS = 6

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _on_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: run with MOONCAKE_TEST_DATABASE=postgres (make test does)")


def test_the_suite_runs_on_the_throwaway_server() -> None:
    assert connection.settings_dict["HOST"] == "127.0.0.1"
    assert connection.settings_dict["NAME"].startswith("test_")


@pytest.mark.parametrize("lock_row", ["migrated", "flushed"])
def test_racing_setup_posts_make_exactly_one_administrator(lock_row: str) -> None:
    # "flushed": the lock row is gone (manage.py flush, or a transactional test's flush before this one).
    if lock_row == "migrated":
        SetupLock.objects.get_or_create(pk=SetupLock.SINGLETON)
    else:
        SetupLock.objects.all().delete()
    start = threading.Barrier(RACERS)
    statuses: list[int] = []

    def post(i: int) -> None:
        try:
            client = Client(REMOTE_ADDR="127.0.0.1")
            form = {"username": f"admin{i}", "email": "", "password1": PASSWORD, "password2": PASSWORD}
            start.wait()
            statuses.append(client.post("/setup/", form).status_code)
        finally:
            connection.close()  # each thread's own connection, or the test database cannot be dropped

    threads = [threading.Thread(target=post, args=(i,)) for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # The winner is redirected on; every other setup finds the account and is told setup is gone.
    assert sorted(statuses) == [302] + [404] * (RACERS - 1)
    assert User.objects.count() == 1 and User.objects.get().is_superuser
