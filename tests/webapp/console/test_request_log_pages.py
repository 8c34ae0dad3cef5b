"""The request log: chat and API rows side by side, filters by source, pages of 50, shareable URLs, and
query strings that are wrong answered with the log (and an inline note), never an error page."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.accounts.models import RequestLog
from webapp.accounts.services import api_key_create, usage_record
from webapp.console.selectors import REQUEST_LOG_PAGE_SIZE

URL = "/console/requests/"


@pytest.fixture
def mixed_rows(plain: User, staff: User) -> None:
    """120 rows: every third a chat reply of pat's, the rest API calls (some errors, some of root's)."""
    RequestLog.objects.bulk_create(
        RequestLog(
            source="chat" if i % 3 == 0 else "api",
            endpoint="chat" if i % 3 == 0 else "chat.completions",
            user=plain if i % 3 == 0 or i % 2 == 0 else staff,
            model="smol" if i % 4 else "other",
            status_code=429 if i % 10 == 1 else 200,
            duration_s=0.1,
            request_id=f"row-{i:03d}",
        )
        for i in range(120)
    )


def ids(html: str) -> list[str]:
    return re.findall(r"<code>(row-\d{3})</code>", html)


def get(client: Client, htmx: bool = False, **params: str) -> str:
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.get(URL, params, headers=headers)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.database
def test_pages_of_fifty_newest_first_without_overlap(staff_client: Client, mixed_rows: None) -> None:
    assert REQUEST_LOG_PAGE_SIZE == 50
    pages = [ids(get(staff_client, page=str(n))) for n in (1, 2, 3)]
    assert [len(p) for p in pages] == [50, 50, 20]
    seen = [i for p in pages for i in p]
    # Rows created in one bulk insert share timestamps: the id keeps the order total and the pages apart.
    assert seen == [f"row-{i:03d}" for i in range(119, -1, -1)]
    first = get(staff_client)
    assert "Page 1 of 3 (120 requests)" in first and ids(first) == pages[0]


@pytest.mark.database
def test_source_filter_and_column(staff_client: Client, mixed_rows: None) -> None:
    html = get(staff_client, source="chat")
    assert len(ids(html)) == 40 and "Page 1 of 1" not in html and "40 requests." in html
    assert "<th>Source</th>" in html and html.count('class="source-chat"') == 40
    assert 'class="source-api"' not in html
    assert len(ids(get(staff_client, source="api", page="2"))) == 30


@pytest.mark.database
def test_filters_combine_and_page_links_keep_them(staff_client: Client, mixed_rows: None) -> None:
    html = get(staff_client, source="api", status="ok", user="root")
    expected = [i for i in range(120) if i % 3 and i % 2 and i % 10 != 1]
    assert sorted(ids(html)) == sorted(f"row-{i:03d}" for i in expected)
    html = get(staff_client, source="api")
    assert "Page 1 of 2 (80 requests)" in html
    assert 'href="?source=api&amp;page=2"' in html  # the next page keeps the filter
    page_two = get(staff_client, htmx=True, source="api", page="2")
    assert 'href="?source=api&amp;page=1"' in page_two and "Older" not in page_two


@pytest.mark.database
def test_model_and_status_filters(staff_client: Client, mixed_rows: None) -> None:
    assert len(ids(get(staff_client, model="other", page="1"))) == 30
    assert "12 requests." in get(staff_client, status="error")
    assert "12 requests." in get(staff_client, status="429", source="")


@pytest.mark.database
@pytest.mark.parametrize(
    "params",
    [
        {"page": "abc"},
        {"page": "0"},
        {"page": "-3"},
        {"page": "99999999999999999999999999"},
        {"page": "1e400"},
        {"source": "carrier-pigeon"},
        {"status": "teapot"},
        {"min_tokens": "99999999999999999999999999"},
        {"min_tokens": "-1"},
        {"min_ttft_s": "nan"},
        {"min_duration_s": "inf"},
        {"request_id": "x" * 500},
        {"user": "\x00"},
    ],
)
def test_bad_query_values_are_answered_cleanly(
    staff_client: Client, mixed_rows: None, params: dict[str, str]
) -> None:
    for htmx in (False, True):
        html = get(staff_client, htmx=htmx, **params)
        assert "<th>Source</th>" in html


@pytest.mark.database
def test_an_invalid_filter_is_shown_and_the_others_still_apply(
    staff_client: Client, mixed_rows: None
) -> None:
    html = get(staff_client, source="chat", status="teapot")
    assert 'role="alert"' in html and "Status" in html and "teapot" in html
    assert len(ids(html)) == 40  # the source filter still holds


@pytest.mark.database
def test_a_huge_token_filter_matches_nothing(staff_client: Client, mixed_rows: None) -> None:
    html = get(staff_client, min_tokens="99999999999999999999")
    assert ids(html) == [] and "No requests match." in html


def test_requests_page_is_staff_only(client: Client, plain: User) -> None:
    client.force_login(plain)
    assert client.get(URL).status_code in (302, 403, 404)


@pytest.mark.database
def test_user_page_usage_includes_chat(staff_client: Client, plain: User) -> None:
    # A chat reply's totals (no key) and an API key's sum into the user's daily usage.
    key = api_key_create(user=plain, name="k").api_key
    usage_record(user_id=plain.pk, api_key_id=None, prompt_tokens=7, completion_tokens=11)
    usage_record(user_id=plain.pk, api_key_id=key.pk, prompt_tokens=3, completion_tokens=4, error=True)
    html = staff_client.get(reverse("console:user", args=[plain.pk])).content.decode()
    assert "<td>2</td><td>1</td><td>10</td><td>15</td>" in html
