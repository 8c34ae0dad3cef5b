"""The chat socket under abuse: floods, bad frames, revoked logins, ended sessions, oversized messages."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.db.backends.utils import CursorWrapper
from django.test import Client

from tests.webapp.chat.fakes import FakeEngine
from tests.webapp.chat.wsutil import connected, is_idle, receive_until
from webapp.asgi import application
from webapp.chat import events, guard
from webapp.chat.generation import chat_replies
from webapp.chat.models import Conversation, Message
from webapp.core.errors import InvalidRequest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every SQL statement run on any thread (the consumer's DB work runs off the test's thread)."""
    seen: list[str] = []
    original = CursorWrapper.execute

    def execute(self: CursorWrapper, sql: str, params: Any = None) -> Any:
        seen.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(CursorWrapper, "execute", execute)
    yield seen


@pytest.mark.database
async def test_flood_is_refused_without_db_work_then_closed(
    monkeypatch: pytest.MonkeyPatch, queries: list[str], alice: User, chat: Conversation
) -> None:
    monkeypatch.setattr(guard, "FRAME_REFILL_PER_S", 0.0)  # no refill: the test's timing cannot matter
    ws = await connected(alice, chat.pk)
    for _ in range(guard.FRAME_BURST):
        await ws.send_json_to({"type": "dance"})
        assert (await ws.receive_json_from())["code"] == "invalid"
    queries.clear()
    await ws.send_json_to({"type": "stop"})
    assert (await ws.receive_json_from())["code"] == "too_fast"
    assert queries == []
    for _ in range(guard.FLOOD_CLOSE_AFTER - 1):
        await ws.send_json_to({"type": "send", "content": "spam"})
        assert (await ws.receive_json_from())["code"] == "too_fast"
    await ws.send_json_to({"type": "stop"})
    assert await ws.receive_output() == {"type": "websocket.close", "code": guard.CLOSE_POLICY_VIOLATION}
    assert queries == []
    await ws.disconnect()


def test_token_bucket_refills() -> None:
    bucket = guard.TokenBucket(burst=2, rate=5.0, tokens=2, updated=0.0)
    assert bucket.take(0.0) and bucket.take(0.0) and not bucket.take(0.0)
    assert not bucket.take(0.1)  # half a token
    assert bucket.take(0.2)
    assert bucket.take(10.0) and bucket.take(10.0) and not bucket.take(10.0)  # never above the burst


@pytest.mark.database
async def test_malformed_frames_are_errors_and_the_socket_stays_open(
    monkeypatch: pytest.MonkeyPatch, fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    monkeypatch.setattr(guard, "REVALIDATE_INTERVAL_S", 0.0)  # a valid user passes the check every frame
    ws = await connected(alice, chat.pk)
    frames: list[dict[str, Any]] = [
        {"text_data": "not json {"},
        {"bytes_data": b"\x00\x01binary"},
        {"text_data": "[1, 2, 3]"},
        {"text_data": '"just a string"'},
        {"text_data": "null"},
        {"text_data": '{"type": "dance"}'},
        {"text_data": '{"type": "send", "content": "' + "x" * guard.MAX_FRAME_CHARS + '"}'},
    ]
    for frame in frames:
        await ws.send_to(**frame)
        event = await ws.receive_json_from()
        assert (event["type"], event["code"]) == ("error", "invalid"), frame
    await ws.send_json_to({"type": "send", "content": "still here"})
    seen = await receive_until(ws, is_idle)
    assert any(e["type"] == "upsert" and "still here" in e["html"] for e in seen)
    await chat_replies().wait_idle()
    await ws.disconnect()


@pytest.mark.database
@pytest.mark.parametrize("change", ["deactivate", "password"])
async def test_revoked_login_closes_the_socket(
    monkeypatch: pytest.MonkeyPatch, change: str, alice: User, chat: Conversation
) -> None:
    monkeypatch.setattr(guard, "REVALIDATE_INTERVAL_S", 0.0)
    ws = await connected(alice, chat.pk)
    user = await User.objects.aget(pk=alice.pk)
    if change == "deactivate":
        user.is_active = False
    else:
        user.set_password("a new one")
    await sync_to_async(user.save)()
    await ws.send_json_to({"type": "dance"})
    assert await ws.receive_output() == {"type": "websocket.close", "code": 4401}
    await ws.disconnect()


@pytest.mark.database
async def test_watching_socket_is_closed_when_the_user_is_deactivated(
    monkeypatch: pytest.MonkeyPatch, alice: User, chat: Conversation
) -> None:
    monkeypatch.setattr(guard, "REVALIDATE_INTERVAL_S", 0.0)
    ws = await connected(alice, chat.pk)
    await User.objects.filter(pk=alice.pk).aupdate(is_active=False)
    await events.broadcast(chat.pk, events.state(running=False))
    assert await ws.receive_output() == {"type": "websocket.close", "code": 4401}
    await ws.disconnect()


@pytest.mark.database
async def test_revalidation_is_throttled(queries: list[str], alice: User, chat: Conversation) -> None:
    ws = await connected(alice, chat.pk)
    await User.objects.filter(pk=alice.pk).aupdate(is_active=False)
    await ws.send_json_to({"type": "dance"})  # within REVALIDATE_INTERVAL_S of connecting: not re-read yet
    assert (await ws.receive_json_from())["code"] == "invalid"
    assert not any("auth_user" in q for q in queries if q.lstrip().upper().startswith("SELECT"))
    await ws.disconnect()


@pytest.mark.database
@pytest.mark.parametrize("action", ["send", "edit"])
async def test_huge_message_is_refused_before_any_tokenizer_work(
    monkeypatch: pytest.MonkeyPatch, action: str, fake_engine: FakeEngine, chat: Conversation
) -> None:
    calls: list[Any] = []

    def template(*args: Any, **kwargs: Any) -> list[int]:
        calls.append(args)
        return [1]

    monkeypatch.setattr(fake_engine, "apply_chat_template", template)
    service = chat_replies()
    huge = "x" * (1 << 20)
    with pytest.raises(InvalidRequest) as caught:
        if action == "send":
            await service.send(conversation=chat, content=huge)
        else:
            await service.edit(conversation=chat, message_id=1, content=huge, nonce=None)
    assert caught.value.code == "invalid" and "longer than" in caught.value.message
    assert calls == []


# ---- a logged-out session closes its sockets within REVALIDATE_INTERVAL_S --------------------------------


def _log_out(session_key: str) -> None:
    """POST /logout/ from the browser holding this session, as the logout button does."""
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = session_key
    assert client.post("/logout/").status_code == 302


@pytest.mark.database
async def test_logout_closes_a_socket_that_only_listens(
    monkeypatch: pytest.MonkeyPatch, alice: User, chat: Conversation
) -> None:
    monkeypatch.setattr(guard, "REVALIDATE_INTERVAL_S", 0.3)
    ws = await connected(alice, chat.pk)
    await sync_to_async(_log_out)(ws.scope["session"].session_key)
    # No frame and no event: the socket's own re-check closes it within the period.
    assert await ws.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}
    await ws.disconnect()


@pytest.mark.database
async def test_after_logout_a_send_is_refused_not_answered(
    monkeypatch: pytest.MonkeyPatch, fake_engine: FakeEngine, alice: User, chat: Conversation
) -> None:
    # Through the real stack (AuthMiddlewareStack reads the cookie), with the browser's own session.
    monkeypatch.setattr(guard, "REVALIDATE_INTERVAL_S", 0.0)
    client = Client()
    await sync_to_async(client.force_login)(alice)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    ws = WebsocketCommunicator(
        application,
        f"/ws/chat/{chat.pk}/",
        headers=[(b"origin", b"http://testserver"), (b"host", b"testserver"),
                 (b"cookie", f"{settings.SESSION_COOKIE_NAME}={key}".encode())],
    )  # fmt: skip
    assert (await ws.connect())[0]
    assert await ws.receive_json_from() == {"type": "state", "running": False}
    await sync_to_async(_log_out)(key)
    await ws.send_json_to({"type": "send", "content": "still there?"})
    assert await ws.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}
    assert not await Message.objects.filter(conversation=chat).aexists()
    await ws.disconnect()


@pytest.mark.database
async def test_another_login_keeps_the_socket(
    monkeypatch: pytest.MonkeyPatch, alice: User, chat: Conversation
) -> None:
    monkeypatch.setattr(guard, "REVALIDATE_INTERVAL_S", 0.0)
    ws = await connected(alice, chat.pk)
    other = Client()
    await sync_to_async(other.force_login)(alice)  # a second browser, then its logout
    await sync_to_async(_log_out)(other.cookies[settings.SESSION_COOKIE_NAME].value)
    await ws.send_json_to({"type": "dance"})
    assert (await ws.receive_json_from())["code"] == "invalid"  # still open: its own session lives on
    await ws.disconnect()


async def test_a_socket_without_a_session_counts_as_logged_out() -> None:
    assert not await guard.session_is_for(None, 1)
    assert not await guard.session_is_for("no-such-session", 1)
