"""The API's request log row stores the request's id; the console's request log shows it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

from tests.webapp.api.conftest import post_json, sse_events
from tests.webapp.api.test_validation import USER
from webapp.accounts.models import RequestLog
from webapp.core.request_id import HEADER

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("stream", [False, True])
async def test_request_log_row_has_the_request_id(client: AsyncClient, stream: bool) -> None:
    body = {"messages": USER, "stream": stream}
    response = await post_json(client, "/v1/chat/completions", body, **{HEADER: f"client-id-{stream}"})
    assert response.status_code == 200 and response[HEADER] == f"client-id-{stream}"
    if stream:
        await sse_events(response)
    row = await RequestLog.objects.aget()
    assert row.request_id == f"client-id-{stream}"


async def test_generated_id_is_the_one_logged(client: AsyncClient) -> None:
    response = await post_json(client, "/v1/chat/completions", {"messages": USER})
    row = await RequestLog.objects.aget()
    assert row.request_id and row.request_id == response[HEADER]


def test_console_request_log_shows_the_id(db: None) -> None:
    admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw-123456789")
    RequestLog.objects.create(
        endpoint="chat.completions", status_code=500, duration_s=0.1, request_id="shown-id-77"
    )
    client = Client()
    client.force_login(admin)
    html = client.get("/console/requests/").content.decode()
    assert "<th>Request id</th>" in html and "<code>shown-id-77</code>" in html
