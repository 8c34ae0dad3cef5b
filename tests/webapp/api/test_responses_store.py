"""Stored responses against the fake engine: retrieve, delete, input_items, previous_response_id,
ownership, background responses and cancel, expiry."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.utils import timezone

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_auth_limits import bearer, new_key
from tests.webapp.api.test_responses import SCRIPT, last_prompt
from tests.webapp.api.test_validation import assert_openai_error
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.models import RequestLog
from webapp.api import tasks
from webapp.api.models import StoredResponse
from webapp.api.services import responses_run, responses_store
from webapp.api.services.chat import ChatRenderer
from webapp.api.services.pipeline import Job
from webapp.api.services.responses_run import wait_background
from webapp.api.services.responses_store import stored_cancel
from webapp.core.errors import Unavailable
from webapp.serving.streams import run_to_end

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.database]


async def create(client: AsyncClient, **body: Any) -> dict[str, Any]:
    response = await post_json(client, "/v1/responses", body)
    assert response.status_code == 200, response.content
    return dict(response.json())


async def test_a_stored_response_is_retrieved_listed_and_deleted(client: AsyncClient) -> None:
    made = await create(
        client, input=[{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    )
    got = await client.get(f"/v1/responses/{made['id']}")
    assert got.status_code == 200 and got.json() == made and made["store"] is True
    items = (await client.get(f"/v1/responses/{made['id']}/input_items")).json()
    assert items["object"] == "list" and items["has_more"] is False
    texts = [i["content"][0]["text"] for i in items["data"]]
    assert texts == ["two", "one"]  # newest first by default
    assert items["first_id"] == items["data"][0]["id"] and items["last_id"] == items["data"][1]["id"]
    assert all(i["type"] == "message" and i["content"][0]["type"] == "input_text" for i in items["data"])
    deleted = await client.delete(f"/v1/responses/{made['id']}")
    assert deleted.json() == {"id": made["id"], "object": "response.deleted", "deleted": True}
    for response in (
        await client.get(f"/v1/responses/{made['id']}"),
        await client.delete(f"/v1/responses/{made['id']}"),
        await client.get(f"/v1/responses/{made['id']}/input_items"),
    ):
        assert assert_openai_error(response, 404, "not_found_error")["param"] == "response_id"


async def test_input_items_pages(client: AsyncClient) -> None:
    made = await create(client, input=[{"role": "user", "content": str(i)} for i in range(5)])
    url = f"/v1/responses/{made['id']}/input_items"
    first = (await client.get(url, {"limit": "2", "order": "asc"})).json()
    assert [i["content"][0]["text"] for i in first["data"]] == ["0", "1"] and first["has_more"]
    after = str(first["last_id"])
    rest = (await client.get(url, {"limit": "10", "order": "asc", "after": after})).json()
    assert [i["content"][0]["text"] for i in rest["data"]] == ["2", "3", "4"] and not rest["has_more"]
    assert assert_openai_error(await client.get(url, {"limit": 0}), 400, "invalid_request_error")
    assert assert_openai_error(await client.get(url, {"after": "msg_nope"}), 400, "invalid_request_error")


async def test_store_false_is_not_kept(client: AsyncClient) -> None:
    made = await create(client, input="hi", store=False)
    assert made["store"] is False
    assert_openai_error(await client.get(f"/v1/responses/{made['id']}"), 404, "not_found_error")


async def test_previous_response_id_continues_the_conversation(
    client: AsyncClient, engine: FakeEngine
) -> None:
    first = await create(client, input="first question", instructions="Only for turn one.")
    second = await create(client, input="second question", previous_response_id=first["id"])
    assert second["previous_response_id"] == first["id"]
    assert last_prompt(engine) == (
        f"<|user|> first question\n<|assistant|> {SCRIPT}\n<|user|> second question\n<|assistant|> "
    )
    third = await create(client, input="third", previous_response_id=second["id"], instructions="New rules.")
    assert last_prompt(engine).startswith("<|system|> New rules.\n<|user|> first question\n")
    assert last_prompt(engine).count(SCRIPT) == 2 and third["status"] == "completed"
    # Only this turn's input is listed as the response's input items.
    items = (await client.get(f"/v1/responses/{third['id']}/input_items")).json()["data"]
    assert [i["content"][0]["text"] for i in items] == ["third"]


async def test_a_streamed_stored_response_is_retrievable(client: AsyncClient) -> None:
    response = await post_json(client, "/v1/responses", {"input": "hi", "stream": True})
    raw = b"".join([c async for c in response.streaming_content]).decode()
    final = json.loads(raw.split("\n\n")[-2].split("\n")[1].removeprefix("data: "))["response"]
    got = (await client.get(f"/v1/responses/{final['id']}")).json()
    assert got == final and got["status"] == "completed"


@pytest.fixture
def auth_required(settings: Any, manager: FakeModelManager) -> None:
    settings.MOONCAKE_API_AUTH = "required"


async def test_another_users_response_is_not_found(auth_required: None, db: None) -> None:
    alice, bob = bearer(await new_key("alice")), bearer(await new_key("bob"))
    client = AsyncClient()
    made = (await post_json(client, "/v1/responses", {"input": "secret"}, **alice)).json()
    url = f"/v1/responses/{made['id']}"
    assert (await client.get(url, headers=alice)).status_code == 200
    for response in (
        await client.get(url, headers=bob),
        await client.get(url + "/input_items", headers=bob),
        await client.delete(url, headers=bob),
        await post_json(client, url + "/cancel", {}, **bob),
    ):
        assert_openai_error(response, 404, "not_found_error")
    follow = await post_json(
        client, "/v1/responses", {"input": "x", "previous_response_id": made["id"]}, **bob
    )
    assert assert_openai_error(follow, 404, "not_found_error")["param"] == "previous_response_id"
    assert (await client.get(url, headers=alice)).status_code == 200  # bob's delete did nothing
    assert_openai_error(await client.get(url), 401, "authentication_error")


async def test_background_response_finishes_later(client: AsyncClient) -> None:
    made = await create(client, input="hi", background=True)
    assert made["status"] == "in_progress" and made["background"] is True and made["output"] == []
    await wait_background(made["id"])
    done = (await client.get(f"/v1/responses/{made['id']}")).json()
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == SCRIPT
    assert done["usage"]["output_tokens"] == 8
    # Cancelling a finished one returns it as it is.
    again = (await post_json(client, f"/v1/responses/{made['id']}/cancel", {})).json()
    assert again["status"] == "completed"


async def test_cancel_stops_a_background_response(client: AsyncClient, engine: FakeEngine) -> None:
    engine.token_delay = 0.2
    made = await create(client, input="hi", background=True)
    cancel = await post_json(client, f"/v1/responses/{made['id']}/cancel", {})
    assert cancel.status_code == 200 and cancel.json()["status"] == "cancelled"
    await wait_background(made["id"])
    assert engine.aborted and not engine.running
    assert (await client.get(f"/v1/responses/{made['id']}")).json()["status"] == "cancelled"


async def test_a_cancel_made_on_another_replica_stops_the_generation_here(
    client: AsyncClient, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another replica only marks the row (it has no task of this one): the watcher here reads the row and
    aborts the engine request."""
    monkeypatch.setattr(responses_run, "CANCEL_POLL_S", 0.05)
    engine.token_delay = 0.2
    made = await create(client, input="hi", background=True)
    elsewhere = await sync_to_async(stored_cancel)(made["id"], None)
    assert elsewhere["status"] == "cancelled" and made["id"] in responses_run._tasks
    await asyncio.wait_for(wait_background(made["id"]), timeout=5)
    assert engine.aborted and not engine.running
    assert (await client.get(f"/v1/responses/{made['id']}")).json()["status"] == "cancelled"


async def test_cancel_of_a_foreground_response_is_400(client: AsyncClient) -> None:
    made = await create(client, input="hi")
    cancel = await post_json(client, f"/v1/responses/{made['id']}/cancel", {})
    error = assert_openai_error(cancel, 400, "invalid_request_error")
    assert error["param"] == "response_id"


async def test_a_background_engine_error_is_a_failed_response(
    client: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Failing(ChatRenderer):
        async def complete(self, job: Job, generations: list[Any]) -> dict[str, Any]:
            await run_to_end(generations)
            raise Unavailable("The engine stopped.", code="engine_dead")

    monkeypatch.setattr(responses_run, "ChatRenderer", Failing)
    made = await create(client, input="hi", background=True)
    await wait_background(made["id"])
    got = (await client.get(f"/v1/responses/{made['id']}")).json()
    assert got["status"] == "failed" and got["error"] == {
        "code": "engine_dead",
        "message": "The engine stopped.",
    }
    log = await RequestLog.objects.aget()
    assert log.status_code == 503 and log.endpoint == "responses"


def _age(response_id: str, days: float) -> None:
    StoredResponse.objects.filter(id=response_id).update(expires_at=timezone.now() - dt.timedelta(days=days))


async def test_expired_responses_are_gone_and_pruned(client: AsyncClient, settings: Any) -> None:
    settings.MOONCAKE_RESPONSES_DAYS = 3
    old, fresh = await create(client, input="old"), await create(client, input="new")
    row = await StoredResponse.objects.aget(id=fresh["id"])
    assert dt.timedelta(days=2.9) < row.expires_at - row.created_at < dt.timedelta(days=3.1)
    await sync_to_async(_age)(old["id"], 0.01)
    assert_openai_error(await client.get(f"/v1/responses/{old['id']}"), 404, "not_found_error")
    follow = await post_json(client, "/v1/responses", {"input": "x", "previous_response_id": old["id"]})
    assert_openai_error(follow, 404, "not_found_error")
    assert await sync_to_async(tasks.prune_responses)() == 1
    assert [r.id async for r in StoredResponse.objects.all()] == [fresh["id"]]
    assert settings.CELERY_BEAT_SCHEDULE["prune-responses"]["task"] == "api.prune_responses"


async def test_a_background_response_its_server_never_finished_is_failed_by_the_prune_job(
    client: AsyncClient, engine: FakeEngine
) -> None:
    """The process running it stopped: nothing will finish the row, so the hourly job fails it once the
    request time limit (and a grace) has passed; a fresh active one is left alone."""
    engine.token_delay = 0.2
    made = await create(client, input="hi", background=True)
    responses_run._tasks[made["id"]].cancel()  # as if the process had died: nothing writes the row again
    await sync_to_async(StoredResponse.objects.filter(id=made["id"]).update)(status="in_progress")
    later = timezone.now() + dt.timedelta(seconds=responses_store.request_timeout_s() + 60)
    assert await sync_to_async(responses_store.responses_fail_orphans)(now=later) == 0
    much_later = later + dt.timedelta(seconds=responses_store.ORPHAN_GRACE_S)
    assert await sync_to_async(responses_store.responses_fail_orphans)(now=much_later) == 1
    got = (await client.get(f"/v1/responses/{made['id']}")).json()
    assert got["status"] == "failed" and got["error"]["code"] == "server_error"
