"""The console's Usage page: tokens and requests per day, user, group, model and source over a range,
sortable, narrowed by filters, exported as CSV; bad queries answered inline."""

from __future__ import annotations

import csv
import datetime as dt
import io

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from webapp.accounts.services import usage_record
from webapp.console.usage import UsageQuery, usage_report

pytestmark = [pytest.mark.database, pytest.mark.django_db]
TODAY = dt.date(2026, 11, 30)


@pytest.fixture
def usage() -> None:
    team = Group.objects.create(name="team")
    both = Group.objects.create(name="both")
    ann = User.objects.create_user("ann")
    ben = User.objects.create_user("=cmd")  # a name a spreadsheet would run as a formula
    ann.groups.add(team, both)
    for day, user, model, source, tokens in [
        (TODAY, ann, "qwen", "api", 100),
        (TODAY, ann, "qwen", "chat", 50),
        (TODAY - dt.timedelta(days=1), ben, "llama", "api", 30),
        (TODAY - dt.timedelta(days=40), ann, "qwen", "api", 999),  # outside the default 30 days
    ]:
        usage_record(
            user_id=user.pk, api_key_id=None, prompt_tokens=tokens, completion_tokens=1,
            date=day, model=model, source=source,
        )  # fmt: skip


def _report(**fields: object) -> dict[str, tuple[int, int]]:
    report = usage_report(UsageQuery.from_form(dict(fields), today=TODAY))
    return {row.key: (row.requests, row.total_tokens) for row in report.rows}


def test_every_dimension(usage: None) -> None:
    assert _report(by="day") == {"2026-11-29": (1, 31), "2026-11-30": (2, 152)}
    assert _report(by="user") == {"=cmd": (1, 31), "ann": (2, 152)}
    assert _report(by="model") == {"llama": (1, 31), "qwen": (2, 152)}
    assert _report(by="source") == {"api": (2, 132), "chat": (1, 51)}
    # ann is in two groups: each group counts her; =cmd is in none.
    assert _report(by="group") == {"(none)": (1, 31), "both": (2, 152), "team": (2, 152)}


def test_filters_narrow_and_the_range_reaches_back(usage: None) -> None:
    assert _report(by="model", source="chat") == {"qwen": (1, 51)}
    assert _report(by="user", group="TEAM") == {"ann": (2, 152)}
    assert _report(by="day", user="ann", start=TODAY - dt.timedelta(days=60)) == {
        "2026-10-21": (1, 1000),
        "2026-11-30": (2, 152),
    }
    report = usage_report(UsageQuery.from_form({}, today=TODAY))
    assert len(report.days) == 30 and report.total.total_tokens == 183


def test_the_page_sorts_and_exports(usage: None, staff_client: Client) -> None:
    end = TODAY.isoformat()
    page = staff_client.get(f"/console/usage/?by=user&end={end}&sort=-total_tokens").content.decode()
    assert page.index('data-key="ann"') < page.index('data-key="=cmd"')
    assert "sort=total_tokens" in page  # the current column's link flips the direction
    page = staff_client.get(f"/console/usage/?by=user&end={end}&sort=total_tokens").content.decode()
    assert page.index('data-key="=cmd"') < page.index('data-key="ann"')
    assert page.count('class="prompt"') == 30  # one bar per day of the range
    response = staff_client.get(f"/console/usage/?by=user&end={end}&format=csv")
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["user", "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens"]
    assert ["'=cmd", "1", "0", "30", "1", "31"] in rows  # never a formula in a spreadsheet


@pytest.mark.parametrize(
    "query",
    [
        "by=planet",
        "start=yesterday",
        "start=2026-11-30&end=2026-11-01",
        "start=2020-01-01&end=2026-11-30",
        "sort=drop%20table",
        "user=" + "x" * 500,
    ],
)
def test_bad_queries_are_answered_inline(usage: None, staff_client: Client, query: str) -> None:
    response = staff_client.get(f"/console/usage/?{query}")
    assert response.status_code == 400
    assert 'class="errorlist' in response.content.decode()
    csv_response = staff_client.get(f"/console/usage/?{query}&format=csv")
    assert csv_response.status_code == 400 and csv_response["Content-Type"].startswith("text/html")


def test_feedback_is_listed_per_model_with_shared_chats_counted(staff_client: Client) -> None:
    from webapp.chat.models import Conversation, Message
    from webapp.organize.models import Feedback, Share

    user = User.objects.create_user("rater")
    for model, rating, shared in [("qwen", "up", True), ("qwen", "down", False), ("llama", "down", False)]:
        chat = Conversation.objects.create(user=user)
        reply = Message.objects.create(conversation=chat, role="assistant", content="x", model=model)
        Feedback.objects.create(message=reply, user=user, rating=rating, model=model)
        if shared:
            Share.objects.create(conversation=chat, token_hash=f"h-{model}-{rating}", prefix="p")
    page = staff_client.get("/console/usage/").content.decode()
    table = page[page.index('id="usage-feedback"') :]
    qwen = table[table.index('data-model="qwen"') :]
    assert qwen.startswith('data-model="qwen"><td>qwen</td><td>1</td><td>1</td><td>1</td>')
    llama = table[table.index('data-model="llama"') :]
    assert llama.startswith('data-model="llama"><td>llama</td><td>0</td><td>1</td><td>0</td>')
    assert table.index('data-model="qwen"') < table.index('data-model="llama"')  # most rated first
    assert "/console/feedback/?model=qwen" in table
