"""The database marker's check: which code it lists, and how it charges a query to that code."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from tests.database_marker import QueryWatch, Span, database_dependent_code


def test_the_listed_functions_are_those_whose_queries_can_differ_by_database() -> None:
    names = {span.name for spans in database_dependent_code().values() for span in spans}
    assert "webapp.core.services._first_admin_create_locked" in names  # select_for_update
    assert "webapp.organize.fulltext._postgres_matches" in names  # full-text search
    assert "webapp.accounts.services._usage_add" in names  # F() updates in a transaction
    assert "django.db.migrations.executor" in names
    assert "webapp.core.selectors.users_exist" not in names  # a plain exists() is the same everywhere
    assert not any(".migrations." in name for name in names if name.startswith("webapp."))


def _listed_query() -> int:
    return get_user_model().objects.count()


def _unlisted_query() -> int:
    return get_user_model().objects.count()


@pytest.mark.django_db
def test_a_query_is_charged_to_the_listed_function_on_its_stack_only() -> None:
    lines, first = inspect.getsourcelines(_listed_query)
    watch = QueryWatch({str(Path(__file__)): [Span(first, first + len(lines) - 1, "listed")]})
    with connection.execute_wrapper(watch):
        _unlisted_query()
        assert watch.take() == set()
        _listed_query()
        assert watch.take() == {"listed"}
        assert watch.take() == set()  # taking resets it for the next test
