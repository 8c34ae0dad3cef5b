"""The console's per-model and global defaults reach the engine when a request omits them."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.fake_engine import FakeEngine
from webapp.accounts.models import RequestLog
from webapp.core.models import EngineSettings, ModelRegistration

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = "You are a terse pirate."


@pytest.fixture
async def registered() -> ModelRegistration:
    return await ModelRegistration.objects.acreate(
        name="fake-model",
        source="default",
        sampling_defaults={"temperature": 0.3, "top_k": 7, "max_tokens": 4},
        system_prompt=SYSTEM,
    )


def last_params(engine: FakeEngine) -> Any:
    return engine.calls[-1][1]


def last_prompt(engine: FakeEngine) -> str:
    prompt = engine.calls[-1][0]
    return engine.tokenizer.decode(prompt) if isinstance(prompt, list) else prompt


@pytest.mark.database
async def test_model_defaults_fill_omitted_chat_fields(
    client: AsyncClient, engine: FakeEngine, registered: ModelRegistration
) -> None:
    response = await post_json(
        client, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}
    )
    assert response.status_code == 200
    params = last_params(engine)
    assert (params.temperature, params.top_k, params.max_tokens) == (0.3, 7, 4)
    assert response.json()["usage"]["completion_tokens"] == 4


@pytest.mark.database
async def test_explicit_values_win_over_model_defaults(
    client: AsyncClient, engine: FakeEngine, registered: ModelRegistration
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 1.5, "max_tokens": 2, "top_k": 3}
    assert (await post_json(client, "/v1/chat/completions", body)).status_code == 200
    params = last_params(engine)
    assert (params.temperature, params.top_k, params.max_tokens) == (1.5, 3, 2)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 5, "temperature": 0}
    assert (await post_json(client, "/v1/chat/completions", body)).status_code == 200
    assert (last_params(engine).max_tokens, last_params(engine).temperature) == (5, 0.0)


@pytest.mark.database
async def test_model_defaults_apply_to_completions_by_alias(
    client: AsyncClient, engine: FakeEngine, registered: ModelRegistration
) -> None:
    registered.name, registered.aliases = "other-name", ["default"]
    await registered.asave()
    body = {"model": "default", "prompt": "Once"}
    assert (await post_json(client, "/v1/completions", body)).status_code == 200
    assert (last_params(engine).temperature, last_params(engine).max_tokens) == (0.3, 4)
    body = {"model": "default", "prompt": "Once", "temperature": 0.9, "max_tokens": 6}
    assert (await post_json(client, "/v1/completions", body)).status_code == 200
    assert (last_params(engine).temperature, last_params(engine).max_tokens) == (0.9, 6)


@pytest.mark.database
async def test_global_defaults_then_openai_defaults(client: AsyncClient, engine: FakeEngine) -> None:
    user = [{"role": "user", "content": "hi"}]
    assert (await post_json(client, "/v1/chat/completions", {"messages": user})).status_code == 200
    assert (last_params(engine).temperature, last_params(engine).top_p) == (1.0, 1.0)
    await EngineSettings.objects.acreate(default_temperature=0.2, default_top_p=0.8, default_max_tokens=3)
    assert (await post_json(client, "/v1/chat/completions", {"messages": user})).status_code == 200
    params = last_params(engine)
    assert (params.temperature, params.top_p, params.max_tokens) == (0.2, 0.8, 3)
    # A model's own default beats the global one; the global fills what the model leaves out.
    await ModelRegistration.objects.acreate(
        name="fake-model", source="default", sampling_defaults={"top_p": 0.5}
    )
    assert (await post_json(client, "/v1/chat/completions", {"messages": user})).status_code == 200
    params = last_params(engine)
    assert (params.temperature, params.top_p, params.max_tokens) == (0.2, 0.5, 3)


@pytest.mark.database
async def test_invalid_console_default_is_skipped(client: AsyncClient, engine: FakeEngine) -> None:
    # The console allows top_p 0; the API does not, and a bad default must not fail every request.
    await ModelRegistration.objects.acreate(
        name="fake-model", source="default", sampling_defaults={"top_p": 0.0, "temperature": 0.4}
    )
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert (await post_json(client, "/v1/chat/completions", body)).status_code == 200
    assert (last_params(engine).top_p, last_params(engine).temperature) == (1.0, 0.4)


@pytest.mark.database
async def test_system_prompt_prepended_only_when_absent(
    client: AsyncClient, engine: FakeEngine, registered: ModelRegistration
) -> None:
    user = {"role": "user", "content": "hi"}
    assert (await post_json(client, "/v1/chat/completions", {"messages": [user]})).status_code == 200
    assert last_prompt(engine).startswith(f"<|system|> {SYSTEM}\n<|user|> hi")
    own = [{"role": "system", "content": "Be kind."}, user]
    assert (await post_json(client, "/v1/chat/completions", {"messages": own})).status_code == 200
    assert SYSTEM not in last_prompt(engine) and last_prompt(engine).startswith("<|system|> Be kind.")
    developer = [{"role": "developer", "content": "Be brief."}, user]
    assert (await post_json(client, "/v1/chat/completions", {"messages": developer})).status_code == 200
    assert SYSTEM not in last_prompt(engine)


@pytest.mark.database
async def test_no_system_prompt_for_unregistered_model(client: AsyncClient, engine: FakeEngine) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    assert (await post_json(client, "/v1/chat/completions", body)).status_code == 200
    assert last_prompt(engine).startswith("<|user|> hi")


@pytest.mark.database
async def test_log_prompts_follows_console_setting(client: AsyncClient, settings: Any) -> None:
    # The process setting stands in only while no row is saved; the console's row decides once it is.
    settings.MOONCAKE_API_LOG_PROMPTS = True
    await EngineSettings.objects.acreate(log_prompts=False)
    body = {"messages": [{"role": "user", "content": "secret plan"}]}
    await post_json(client, "/v1/chat/completions", body)
    assert (await RequestLog.objects.alatest("id")).prompt_text == ""
    settings.MOONCAKE_API_LOG_PROMPTS = False
    await EngineSettings.objects.all().aupdate(log_prompts=True)
    await post_json(client, "/v1/chat/completions", body)
    assert (await RequestLog.objects.alatest("id")).prompt_text == "secret plan"


async def test_concurrent_requests_share_one_defaults_read(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio
    import time

    from webapp.api.services import defaults as module

    reads: list[str] = []

    def slow_read(*, model: str) -> module.RequestDefaults:
        reads.append(model)
        time.sleep(0.05)
        return module.RequestDefaults(system_prompt=f"{model} #{len(reads)}")

    monkeypatch.setattr(module, "request_defaults", slow_read)
    calls = [asyncio.ensure_future(module.request_defaults_shared(model="m")) for _ in range(5)]
    await asyncio.sleep(0.01)
    calls[0].cancel()  # one caller going away does not cancel the read the others wait for
    results = await asyncio.gather(*calls[1:])
    assert reads == ["m"] and {r.system_prompt for r in results} == {"m #1"}
    other = await module.request_defaults_shared(model="other")
    again = await module.request_defaults_shared(model="m")  # a later request reads afresh
    assert (other.system_prompt, again.system_prompt) == ("other #2", "m #3")
    assert not module._reads
