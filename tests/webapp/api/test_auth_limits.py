"""401 under MOONCAKE_API_AUTH=required, 429 + Retry-After for per-key and per-user limits, usage rows."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json, sse_events
from tests.webapp.api.test_validation import USER, assert_openai_error
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.models import ApiKey, DailyUsage, RequestLog
from webapp.accounts.services import CreatedKey, api_key_create, api_key_revoke, user_limits_set

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def auth_required(settings: Any, manager: FakeModelManager) -> None:
    settings.MOONCAKE_API_AUTH = "required"


@sync_to_async
def new_key(username: str = "alice", **limits: int) -> CreatedKey:
    user, _ = User.objects.get_or_create(username=username)
    return api_key_create(user=user, name="test", **limits)


def bearer(created: CreatedKey) -> dict[str, str]:
    return {"Authorization": f"Bearer {created.secret}"}


async def test_missing_and_bad_keys_are_401(auth_required: None, db: None) -> None:
    client = AsyncClient()
    for headers in ({}, {"Authorization": "Bearer mc-wrong"}, {"Authorization": "Basic abc"}):
        for response in (
            await post_json(client, "/v1/chat/completions", {"messages": USER}, **headers),
            await client.get("/v1/models", headers=headers),
            await post_json(client, "/tokenize", {"prompt": "x"}, **headers),
        ):
            error = assert_openai_error(response, 401, "authentication_error")
            assert error["code"] == "invalid_api_key"
            assert "console's Users page (/console/users/" in error["message"]  # where a key comes from


@pytest.mark.database
async def test_valid_key_works_and_is_recorded(auth_required: None, db: None) -> None:
    created = await new_key()
    client = AsyncClient()
    response = await post_json(
        client, "/v1/chat/completions", {"messages": USER, "max_tokens": 3}, **bearer(created)
    )
    assert response.status_code == 200
    key = await ApiKey.objects.aget(pk=created.api_key.pk)
    assert key.last_used_at is not None
    assert created.secret not in key.secret_hash and key.prefix == created.secret[:11]
    usage = await DailyUsage.objects.aget(api_key=key)
    assert (usage.requests, usage.completion_tokens) == (1, 3) and usage.prompt_tokens > 0
    log = await RequestLog.objects.aget(api_key=key)
    assert (log.status_code, log.completion_tokens, log.finish_reason, log.prompt_text) == (
        200,
        3,
        "length",
        "",
    )
    assert log.ttft_s is not None and log.duration_s >= log.ttft_s


async def test_revoked_key_is_401(auth_required: None, db: None) -> None:
    created = await new_key()
    await sync_to_async(api_key_revoke)(api_key=created.api_key)
    response = await post_json(AsyncClient(), "/v1/completions", {"prompt": "x"}, **bearer(created))
    assert_openai_error(response, 401, "authentication_error")


@pytest.mark.database
async def test_auth_off_accepts_anything(client: AsyncClient) -> None:
    response = await post_json(client, "/v1/completions", {"prompt": "x"}, Authorization="Bearer EMPTY")
    assert response.status_code == 200
    assert await RequestLog.objects.filter(api_key__isnull=True).acount() == 1


@pytest.mark.database
async def test_requests_per_minute_is_429(auth_required: None, db: None) -> None:
    created = await new_key(requests_per_minute=2)
    client = AsyncClient()
    for _ in range(2):
        assert (
            await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(created))
        ).status_code == 200
    response = await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(created))
    error = assert_openai_error(response, 429, "rate_limit_error")
    assert error["code"] == "requests_per_minute"
    assert 1 <= int(response["Retry-After"]) <= 60
    other = await new_key(username="bob")
    assert (await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(other))).status_code == 200


@pytest.mark.database
async def test_tokens_per_minute_is_429(auth_required: None, db: None) -> None:
    created = await new_key(tokens_per_minute=5)
    client = AsyncClient()
    assert (
        await post_json(client, "/v1/completions", {"prompt": "x", "max_tokens": 8}, **bearer(created))
    ).status_code == 200
    response = await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(created))
    assert assert_openai_error(response, 429, "rate_limit_error")["code"] == "tokens_per_minute"
    assert int(response["Retry-After"]) >= 1


@pytest.mark.database
async def test_user_limit_spans_keys(auth_required: None, db: None) -> None:
    first = await new_key()
    second = await new_key()
    user = await User.objects.aget(username="alice")
    await sync_to_async(user_limits_set)(
        user=user, requests_per_minute=1, tokens_per_minute=None, max_concurrent_requests=None
    )
    client = AsyncClient()
    assert (await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(first))).status_code == 200
    response = await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(second))
    assert_openai_error(response, 429, "rate_limit_error")


@pytest.mark.database
async def test_concurrent_limit_is_429_until_a_stream_ends(
    auth_required: None, db: None, engine: FakeEngine
) -> None:
    created = await new_key(max_concurrent_requests=1)
    engine.token_delay = 0.01
    client = AsyncClient()
    stream = await post_json(client, "/v1/completions", {"prompt": "x", "stream": True}, **bearer(created))
    assert stream.status_code == 200
    response = await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(created))
    assert assert_openai_error(response, 429, "rate_limit_error")["code"] == "concurrent_requests"
    assert response["Retry-After"] == "1"
    await sse_events(stream)  # finishing the stream frees the slot
    assert (await post_json(client, "/v1/completions", {"prompt": "x"}, **bearer(created))).status_code == 200


@pytest.mark.database
async def test_rejected_requests_are_logged(auth_required: None, db: None) -> None:
    created = await new_key()
    response = await post_json(
        AsyncClient(), "/v1/chat/completions", {"model": "nope", "messages": USER}, **bearer(created)
    )
    assert response.status_code == 404
    log = await RequestLog.objects.aget(api_key_id=created.api_key.pk)
    assert log.status_code == 404 and "nope" in log.error
    usage = await DailyUsage.objects.aget(api_key_id=created.api_key.pk)
    assert usage.errors == 1


@pytest.mark.database
async def test_prompt_text_only_stored_when_enabled(client: AsyncClient, settings: Any) -> None:
    settings.MOONCAKE_API_LOG_PROMPTS = True
    await post_json(
        client, "/v1/chat/completions", {"messages": [{"role": "user", "content": "secret plan"}]}
    )
    assert (await RequestLog.objects.aget()).prompt_text == "secret plan"


@pytest.mark.database
async def test_parallel_requests_share_daily_row(client: AsyncClient) -> None:
    await asyncio.gather(
        *(post_json(client, "/v1/completions", {"prompt": "x", "max_tokens": 1}) for _ in range(5))
    )
    rows = [row async for row in DailyUsage.objects.all()]
    assert sum(r.requests for r in rows) == 5 and sum(r.completion_tokens for r in rows) == 5


async def test_no_key_resolves_without_a_thread_hop(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # A burst of keyless requests must not queue on Django's one thread-sensitive executor.
    from django.test import RequestFactory

    from webapp.api import auth
    from webapp.core.errors import AuthenticationFailed

    def no_hop(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("sync_to_async used without a key")

    monkeypatch.setattr(auth, "sync_to_async", no_hop)
    request = RequestFactory().post("/v1/chat/completions")
    settings.MOONCAKE_API_AUTH = "off"
    caller = await auth.authenticate(request)
    assert caller.api_key is None and caller.user_id is None and caller.limit_checks[0][0] == "anonymous"
    settings.MOONCAKE_API_AUTH = "required"
    with pytest.raises(AuthenticationFailed) as excinfo:
        await auth.authenticate(request)
    assert excinfo.value.status == 401


@pytest.mark.database
async def test_a_refused_request_costs_no_template_work(
    auth_required: None, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    created = await new_key(requests_per_minute=1)
    templated: list[Any] = []
    render = engine.apply_chat_template

    def counting(messages: Any, **kwargs: Any) -> list[int]:
        templated.append(messages)
        return render(messages, **kwargs)

    monkeypatch.setattr(engine, "apply_chat_template", counting)
    client = AsyncClient()
    body = {"messages": USER, "max_tokens": 2}
    assert (await post_json(client, "/v1/chat/completions", body, **bearer(created))).status_code == 200
    assert len(templated) == 1
    response = await post_json(client, "/v1/chat/completions", body, **bearer(created))
    assert assert_openai_error(response, 429, "rate_limit_error")["code"] == "requests_per_minute"
    assert len(templated) == 1  # limits are checked before the template, the tokenizer or a grammar


@pytest.mark.database
async def test_tokenizer_calls_count_as_requests(auth_required: None, engine: FakeEngine) -> None:
    created = await new_key(requests_per_minute=2)
    client = AsyncClient()
    assert (await post_json(client, "/tokenize", {"prompt": "a b"}, **bearer(created))).status_code == 200
    assert (await post_json(client, "/detokenize", {"tokens": [1]}, **bearer(created))).status_code == 200
    response = await post_json(client, "/tokenize", {"prompt": "a b"}, **bearer(created))
    assert assert_openai_error(response, 429, "rate_limit_error")["code"] == "requests_per_minute"


@pytest.mark.database
async def test_every_sequence_counts_against_concurrency(auth_required: None, engine: FakeEngine) -> None:
    created = await new_key(max_concurrent_requests=2)
    client = AsyncClient()
    ok = await post_json(
        client, "/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2}, **bearer(created)
    )
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 2
    # n=3 can never fit under a cap of 2: a 400 that says so, not a 429 to retry forever.
    response = await post_json(
        client, "/v1/chat/completions", {"messages": USER, "n": 3, "max_tokens": 2}, **bearer(created)
    )
    error = assert_openai_error(response, 400, "invalid_request_error")
    assert error["param"] == "n" and error["code"] == "concurrent_requests"
    response = await post_json(
        client, "/v1/completions", {"prompt": ["a", "b"], "n": 2, "max_tokens": 2}, **bearer(created)
    )
    assert assert_openai_error(response, 400, "invalid_request_error")["param"] == "n"
