"""Chat replies are counted as API requests are: one request-log row (source "chat") and the user's daily
totals, however the reply ends; the user's limits hold across chat and API together."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from tests.webapp.fake_engine import FakeEngine as ApiFakeEngine
from tests.webapp.fake_engine import FakeModelManager
from webapp.accounts.models import DailyUsage, RequestLog, UserApiLimits
from webapp.accounts.selectors import usage_daily_for_user
from webapp.accounts.services import api_key_create
from webapp.chat import services
from webapp.chat.generation import chat_replies
from webapp.chat.models import Conversation, Message
from webapp.core.errors import RateLimited
from webapp.core.models import EngineSettings

if TYPE_CHECKING:
    from webapp.serving.runtime import Runtime

pytestmark = [pytest.mark.database, pytest.mark.django_db(transaction=True)]


async def _reply(chat: Conversation) -> Message:
    return await Message.objects.aget(conversation=chat, role="assistant")


async def _usage(user: User) -> DailyUsage:
    """The user's key-less totals for the day, summed over the models and sources they were split by."""
    rows = [row async for row in DailyUsage.objects.filter(user=user, api_key__isnull=True)]
    assert rows and {row.source for row in rows} == {"chat"}
    return DailyUsage(
        date=rows[0].date,
        user=user,
        requests=sum(r.requests for r in rows),
        errors=sum(r.errors for r in rows),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        completion_tokens=sum(r.completion_tokens for r in rows),
    )


async def test_finished_reply_is_logged_and_counted(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    replies = chat_replies()
    await replies.send(conversation=chat, content="hello")
    await replies.wait_idle()
    reply = await _reply(chat)
    row = await RequestLog.objects.aget(endpoint="chat")
    assert (row.source, row.endpoint, row.user_id, row.api_key_id) == ("chat", "chat", alice.pk, None)
    assert (row.status_code, row.finish_reason, row.model, row.error) == (200, "stop", "fake-model", "")
    assert reply.prompt_tokens and row.prompt_tokens == reply.prompt_tokens
    assert reply.completion_tokens and row.completion_tokens == reply.completion_tokens
    assert row.ttft_s is not None and row.duration_s >= row.ttft_s
    # The title the first exchange asked for is the user's usage too, logged on its own row.
    title = await RequestLog.objects.aget(endpoint="chat.title")
    assert (title.source, title.user_id, title.status_code, title.model) == (
        "chat",
        alice.pk,
        200,
        "fake-model",
    )
    assert title.prompt_tokens > 0 and title.completion_tokens > 0 and title.finish_reason == "stop"
    assert await RequestLog.objects.acount() == 2
    usage = await _usage(alice)
    assert (usage.requests, usage.errors) == (2, 0)
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        row.prompt_tokens + title.prompt_tokens,
        row.completion_tokens + title.completion_tokens,
    )


async def test_stopped_reply_is_logged_as_abort(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.delay, fake_engine.reply = 0.05, " ".join(["word"] * 200)
    replies = chat_replies()
    await replies.send(conversation=chat, content="long")
    running = replies.running(chat.pk)
    async with asyncio.timeout(5):
        while running is not None and not running.message.content:
            await asyncio.sleep(0.01)
    assert await replies.stop(chat.pk)
    reply = await _reply(chat)
    row = await RequestLog.objects.aget()
    assert (row.source, row.status_code, row.finish_reason) == ("chat", 200, "abort")
    assert row.completion_tokens == reply.completion_tokens and 0 < row.completion_tokens < 200
    assert (await _usage(alice)).completion_tokens == row.completion_tokens


async def test_reply_that_keeps_going_without_a_socket_is_logged(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.delay = 0.02
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "hello"})
    await receive_until(ws, lambda e: e.get("type") == "state" and e.get("running") is True)
    await ws.disconnect()  # the tab closes; the reply goes on and is accounted when it ends
    await chat_replies().wait_idle()
    row = await RequestLog.objects.aget(endpoint="chat")
    assert (row.source, row.status_code, row.finish_reason) == ("chat", 200, "stop")


async def test_failed_reply_is_logged_with_its_error_status(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    fake_engine.fail_with, fake_engine.fail_after = RuntimeError("CUDA went away"), 2
    replies = chat_replies()
    await replies.send(conversation=chat, content="hello")
    await replies.wait_idle()
    assert (await _reply(chat)).status == Message.Status.ERROR
    row = await RequestLog.objects.aget()
    assert (row.source, row.status_code, row.finish_reason) == ("chat", 500, "error")
    assert "reference" in row.error and "CUDA" not in row.error  # the notice, not the engine's text
    assert (await _usage(alice)).errors == 1


async def test_refused_send_is_logged_as_the_api_logs_a_429(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await UserApiLimits.objects.acreate(user=alice, requests_per_minute=1)
    replies = chat_replies()
    await replies.send(conversation=chat, content="one")
    await replies.wait_idle()
    with pytest.raises(RateLimited):
        await replies.send(conversation=chat, content="two")
    refused = await RequestLog.objects.alatest("id")
    assert (refused.source, refused.status_code, refused.completion_tokens) == ("chat", 429, 0)
    assert refused.error.startswith("Rate limit reached")
    usage = await _usage(alice)
    assert (usage.requests, usage.errors) == (3, 1)  # the reply, its title (not a request per minute), "two"


async def test_prompt_text_follows_the_console_switch(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    replies = chat_replies()
    await EngineSettings.objects.acreate(log_prompts=False)
    await replies.send(conversation=chat, content="secret plan")
    await replies.wait_idle()
    assert (await RequestLog.objects.alatest("id")).prompt_text == ""
    await EngineSettings.objects.all().aupdate(log_prompts=True)
    await replies.regenerate(conversation=chat)
    await replies.wait_idle()
    assert (await RequestLog.objects.alatest("id")).prompt_text == "secret plan"


async def test_token_limit_counts_chat_replies(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await UserApiLimits.objects.acreate(user=alice, tokens_per_minute=10)
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "hello"})
    await receive_until(ws, is_idle)
    await chat_replies().wait_idle()
    await ws.send_json_to({"type": "send", "content": "again"})
    error = (await receive_until(ws, lambda e: e["type"] == "error"))[-1]
    assert error["code"] == "rate_limited" and "10 tokens per minute" in error["message"]
    # The chat stays usable: once the limit is lifted, the same socket sends again.
    await UserApiLimits.objects.filter(user=alice).adelete()
    await ws.send_json_to({"type": "send", "content": "again"})
    await receive_until(ws, lambda e: e.get("type") == "state" and e.get("running") is True)
    await receive_until(ws, is_idle)
    await ws.disconnect()
    await chat_replies().wait_idle()
    assert [r.status_code async for r in RequestLog.objects.order_by("id")] == [200, 429, 200]


@sync_to_async
def _api_secret(user: User) -> str:
    return api_key_create(user=user, name="test").secret


async def test_api_and_chat_share_the_users_request_limit(
    settings: Any, runtime: Runtime, alice: User, chat: Conversation
) -> None:
    # The API's scripted engine serves both channels here: the API path needs its fuller surface.
    runtime.install_manager(FakeModelManager.with_engine(ApiFakeEngine()))
    settings.MOONCAKE_API_AUTH = "required"
    await UserApiLimits.objects.acreate(user=alice, requests_per_minute=2)
    replies = chat_replies()
    await replies.send(conversation=chat, content="first")
    await replies.wait_idle()
    secret = await _api_secret(alice)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    response = await AsyncClient().post(
        "/v1/chat/completions",
        data=body,
        content_type="application/json",
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert response.status_code == 200
    ws = await connected(alice, chat.pk)
    await ws.send_json_to({"type": "send", "content": "third"})
    error = (await receive_until(ws, lambda e: e["type"] == "error"))[-1]
    assert error["code"] == "rate_limited" and error["message"]
    await ws.disconnect()
    rows = [(r.source, r.endpoint, r.status_code) async for r in RequestLog.objects.order_by("id")]
    assert rows == [
        ("chat", "chat", 200),
        ("chat", "chat.title", 200),  # logged, but not one of the two requests per minute
        ("api", "chat.completions", 200),
        ("chat", "chat", 429),
    ]
    totals = await sync_to_async(usage_daily_for_user)(user=alice)
    assert (totals[0].requests, totals[0].errors) == (4, 1)


async def test_second_chat_of_the_user_shares_the_accounting(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    other = await sync_to_async(services.conversation_create)(user=alice)
    replies = chat_replies()
    for conversation in (chat, other):
        await replies.send(conversation=conversation, content="hello")
        await replies.wait_idle()
    assert await RequestLog.objects.filter(source="chat", endpoint="chat", user=alice).acount() == 2
    assert (await _usage(alice)).requests == 4  # each chat's reply and title


async def test_a_used_up_quota_leaves_the_provisional_title_and_logs_no_title(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await UserApiLimits.objects.acreate(user=alice, daily_token_quota=1)  # the reply itself uses it up
    replies = chat_replies()
    await replies.send(conversation=chat, content="hello there")
    await replies.wait_idle()
    assert [r.endpoint async for r in RequestLog.objects.all()] == ["chat"]
    await chat.arefresh_from_db()
    assert chat.title == "hello there" and not chat.title_is_custom


async def test_a_title_never_takes_the_users_one_concurrent_slot(
    fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    await UserApiLimits.objects.acreate(user=alice, max_concurrent_requests=1, requests_per_minute=2)
    fake_engine.title_delay = 0.3  # the title is still being written when the next send comes
    replies = chat_replies()
    await replies.send(conversation=chat, content="one")
    running = replies.running(chat.pk)
    assert running is not None and running.task is not None
    await running.task
    await replies.send(conversation=chat, content="two")  # neither the slot nor a request of the minute
    await replies.wait_idle()
    rows = [(r.endpoint, r.status_code) async for r in RequestLog.objects.order_by("id")]
    assert sorted(rows) == [("chat", 200), ("chat", 200), ("chat.title", 200)]
