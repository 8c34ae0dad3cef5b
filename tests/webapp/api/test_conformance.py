"""OpenAI conformance against a live Daphne with the real default model, through the official client."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import jsonschema_rs
import openai
import pytest
from openai import OpenAI

from tests.live_server import LiveDaphne
from tests.webapp.api.live import MODEL, SERVER_CONFIG, create_key, metric

pytestmark = pytest.mark.slow

HI = [{"role": "user", "content": "Name three colors."}]
PROMPT = "The capital of France is"


def greedy_chat(client: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("max_tokens", 5)
    return client.chat.completions.create(model=MODEL, messages=HI, temperature=0, **kwargs)


def test_models_and_tokenizer(oai: Any, api_server: LiveDaphne, api_key: str) -> None:
    models = oai.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert oai.models.retrieve("default").id == MODEL
    headers = {"Authorization": f"Bearer {api_key}"}
    tok = httpx.post(api_server.url + "/tokenize", json={"prompt": PROMPT}, headers=headers).json()
    assert tok["count"] == len(tok["tokens"]) > 0 and tok["max_model_len"] == 2048
    back = httpx.post(api_server.url + "/detokenize", json={"tokens": tok["tokens"]}, headers=headers).json()
    assert back["prompt"] == PROMPT


def test_greedy_stream_equals_non_stream(oai: Any) -> None:
    whole = greedy_chat(oai)
    chunks = list(greedy_chat(oai, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content and streamed
    assert whole.usage.completion_tokens == 5 and whole.choices[0].finish_reason == "length"


def test_n_choices_have_indices(oai: Any) -> None:
    response = oai.completions.create(model=MODEL, prompt=PROMPT, n=3, max_tokens=4, temperature=0)
    assert sorted(c.index for c in response.choices) == [0, 1, 2]
    assert len({c.text for c in response.choices}) == 1  # greedy n>1: all the same
    sampled = oai.chat.completions.create(model=MODEL, messages=HI, n=2, max_tokens=4, seed=1)
    assert sorted(c.index for c in sampled.choices) == [0, 1]


def test_stop_sequences(oai: Any) -> None:
    full = oai.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0).choices[0].text
    words = full.split()
    assert len(words) >= 2, full
    stop = words[1]
    cut = oai.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0, stop=[stop, "zzz"])
    choice = cut.choices[0]
    assert choice.finish_reason == "stop" and stop not in choice.text
    assert full.startswith(choice.text)


def test_seed_reproducible(oai: Any) -> None:
    def sample() -> str:
        r = oai.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=1.0, seed=1234)
        return r.choices[0].text

    assert sample() == sample()


def test_chat_logprobs_shape(oai: Any) -> None:
    response = greedy_chat(oai, logprobs=True, top_logprobs=3, max_tokens=4)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens == 4
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.bytes == list(entry.token.encode())
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)  # greedy: chosen is the top


def test_completion_echo_logprobs(oai: Any) -> None:
    response = oai.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0, echo=True, logprobs=2
    )
    choice = response.choices[0]
    assert choice.text.startswith(PROMPT)
    lp = choice.logprobs
    n = response.usage.prompt_tokens + response.usage.completion_tokens
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == n
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None for v in lp.token_logprobs[1:])
    assert "".join(lp.tokens) == choice.text
    assert lp.text_offset == sorted(lp.text_offset)


def test_logit_bias(oai: Any, api_server: LiveDaphne, api_key: str) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    base = oai.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1, temperature=0, logprobs=0)
    first = base.choices[0].text
    first_id = httpx.post(
        api_server.url + "/tokenize", json={"prompt": first, "add_special_tokens": False}, headers=headers
    ).json()["tokens"][0]
    banned = oai.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=1, temperature=0, logit_bias={str(first_id): -100}
    )
    assert banned.choices[0].text != first
    forced_id = httpx.post(
        api_server.url + "/tokenize", json={"prompt": " banana", "add_special_tokens": False}, headers=headers
    ).json()["tokens"][0]
    forced = oai.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=2, temperature=0, logit_bias={str(forced_id): 100}
    )
    expected = httpx.post(
        api_server.url + "/detokenize", json={"tokens": [forced_id, forced_id]}, headers=headers
    ).json()["prompt"]
    assert forced.choices[0].text == expected


def test_sse_framing_and_include_usage(api_server: LiveDaphne, api_key: str) -> None:
    body = {
        "model": MODEL,
        "messages": HI,
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST",
        api_server.url + "/v1/chat/completions",
        json=body,
        timeout=60,
        headers={"Authorization": f"Bearer {api_key}"},
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        raw = b"".join(response.iter_bytes()).decode()
    assert raw.endswith("data: [DONE]\n\n")
    frames = raw.split("\n\n")[:-1]
    assert all(f.startswith("data: ") and "\n" not in f for f in frames)
    events = [json.loads(f[6:]) for f in frames[:-1]]
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["usage"] is None for e in events[:-1])
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] == 4
    assert sum(1 for e in events if e["choices"] and e["choices"][0]["finish_reason"]) == 1


def test_concurrent_identical_greedy(oai: Any) -> None:
    with ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(lambda _: greedy_chat(oai, max_tokens=4).choices[0].message.content, range(8)))
    assert len(set(texts)) == 1 and texts[0]


def test_json_schema_output_validates(oai: Any) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "pet": {"enum": ["cat", "dog", "none"]},
        },
        "required": ["name", "age", "pet"],
        "additionalProperties": False,
    }
    response = oai.chat.completions.create(
        model=MODEL,
        temperature=0,
        max_tokens=30,
        messages=[{"role": "user", "content": "Describe a person as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}},
    )
    choice = response.choices[0]
    assert choice.finish_reason == "stop", choice
    assert jsonschema_rs.validator_for(schema).is_valid(json.loads(choice.message.content))
    anything = oai.chat.completions.create(
        model=MODEL, temperature=0, max_tokens=6, messages=HI, response_format={"type": "json_object"}
    )
    # Six tokens rarely close an object, but each one must already be on the way to one.
    content = anything.choices[0].message.content
    assert content.startswith("{")
    if anything.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


@pytest.mark.parametrize("stream", [False, True])
def test_named_tool_call_arguments_validate(oai: Any, stream: bool) -> None:
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "temperature": 0,
        "max_tokens": 30,
        "tools": [WEATHER],
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    }
    if stream:
        chunks = list(oai.chat.completions.create(stream=True, **kwargs))
        calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
        name = calls[0].function.name
        arguments = "".join(tc.function.arguments or "" for tc in calls)
    else:
        message = oai.chat.completions.create(**kwargs).choices[0].message
        assert message.content is None
        name, arguments = message.tool_calls[0].function.name, message.tool_calls[0].function.arguments
    assert name == "get_weather"
    assert jsonschema_rs.validator_for(WEATHER["function"]["parameters"]).is_valid(json.loads(arguments))


def test_required_tool_choice(oai: Any) -> None:
    message = (
        oai.chat.completions.create(
            model=MODEL,
            temperature=0,
            max_tokens=40,
            tools=[WEATHER],
            tool_choice="required",
            messages=[{"role": "user", "content": "Weather in Oslo?"}],
        )
        .choices[0]
        .message
    )
    call = message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert jsonschema_rs.validator_for(WEATHER["function"]["parameters"]).is_valid(
        json.loads(call.function.arguments)
    )


# ---- errors ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prompt": "hello " * 2100},  # longer than max_model_len
        {"prompt": "hello", "max_tokens": 2048},  # prompt + max_tokens over it
        {"prompt": ""},
        {"prompt": [10**7]},  # out-of-vocabulary id
        {"prompt": "hi", "stream_options": {"include_usage": True}},  # without stream
        {"prompt": "hi", "logprobs": 21},
        {"prompt": "hi", "logit_bias": {"1": 200}},
        {"prompt": "hi", "temperature": 3},
    ],
)
def test_bad_requests_are_400(oai: Any, kwargs: dict[str, Any]) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oai.completions.create(model=MODEL, **kwargs)
    assert info.value.status_code == 400
    assert info.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_chat_errors(oai: Any, api_server: LiveDaphne, api_key: str) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=HI, logprobs=True, top_logprobs=21)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="no-such-model", messages=HI)
    malformed = httpx.post(
        api_server.url + "/v1/chat/completions",
        content=b"{oops",
        headers={"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"},
    )
    assert malformed.status_code == 400 and malformed.json()["error"]["type"] == "invalid_request_error"


def test_auth_errors(api_server: LiveDaphne) -> None:
    for key in ("mc-not-a-key", "EMPTY"):
        client: Any = OpenAI(base_url=api_server.url + "/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            client.models.list()
    anonymous = httpx.get(api_server.url + "/v1/models")
    assert anonymous.status_code == 401 and anonymous.json()["error"]["type"] == "authentication_error"


def test_rate_limit_is_429(api_server: LiveDaphne) -> None:
    client: Any = OpenAI(
        base_url=api_server.url + "/v1",
        api_key=create_key(api_server, "limited", requests_per_minute=1),
        max_retries=0,
    )
    client.completions.create(model=MODEL, prompt="hi", max_tokens=1)
    with pytest.raises(openai.RateLimitError) as info:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=1)
    assert int(info.value.response.headers["retry-after"]) >= 1


async def test_queue_full_is_503(api_server: LiveDaphne, api_key: str) -> None:
    """All running slots held by streams, then more requests than the queue holds: the overflow is 503."""
    headers = {"Authorization": f"Bearer {api_key}"}
    # ignore_eos: a holder that finished its answer early would free its slot for the queued requests.
    hold = {"model": MODEL, "messages": HI, "max_tokens": 1000, "stream": True, "temperature": 0.7}
    hold["ignore_eos"] = True
    quick = {"model": MODEL, "prompt": "hi", "max_tokens": 1}
    slots, queue = SERVER_CONFIG["engine"]["max_num_seqs"], SERVER_CONFIG["engine"]["max_queue_len"]
    limits = httpx.Limits(max_connections=256)
    async with (
        httpx.AsyncClient(base_url=api_server.url, timeout=180, limits=limits, headers=headers) as client,
        contextlib.AsyncExitStack() as holders,
    ):
        readers: list[Any] = []  # a collected line iterator would close its connection: a disconnect

        async def hold_slot() -> None:
            response = await holders.enter_async_context(
                client.stream("POST", "/v1/chat/completions", json=hold)
            )
            lines = response.aiter_lines()
            readers.append(lines)
            async for line in lines:
                if line.startswith("data: ") and '"content":""' not in line and '"content":' in line:
                    return

        await asyncio.gather(*(hold_slot() for _ in range(slots)))
        posts = [asyncio.create_task(client.post("/v1/completions", json=quick)) for _ in range(queue + 8)]
        # The overflow is refused at once; the queued rest can only run once the holders let go.
        deadline = time.monotonic() + 60
        while sum(p.done() for p in posts) < 8 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await holders.aclose()
        responses = await asyncio.gather(*posts)
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503}, codes
    overflow = [r for r in responses if r.status_code == 503]
    assert len(overflow) >= 8, codes
    assert all(r.headers["retry-after"] and r.json()["error"]["code"] == "queue_full" for r in overflow)


# ---- cancellation -------------------------------------------------------------------------------------


async def test_cancellation_storm_frees_kv(api_server: LiveDaphne, api_key: str, oai: Any) -> None:
    body = {"model": MODEL, "messages": HI, "max_tokens": 500, "stream": True, "temperature": 0.7}
    headers = {"Authorization": f"Bearer {api_key}"}

    async def drop_after_first_token(client: httpx.AsyncClient) -> bool:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: ") and '"content":""' not in line and '"content":' in line:
                    return True
        return False

    limits = httpx.Limits(max_connections=32)
    async with httpx.AsyncClient(
        base_url=api_server.url, timeout=120, limits=limits, headers=headers
    ) as client:
        got_tokens = await asyncio.gather(*(drop_after_first_token(client) for _ in range(20)))
    assert all(got_tokens)
    started = time.monotonic()
    short = await asyncio.to_thread(greedy_chat, oai, max_tokens=2)
    assert short.choices[0].finish_reason == "length"
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if (
            metric(api_server, "mooncake:kv_cache_usage_perc") == 0
            and metric(api_server, "mooncake:num_requests_running") == 0
        ):
            break
        await asyncio.sleep(0.2)
    assert metric(api_server, "mooncake:kv_cache_usage_perc") == 0
    assert metric(api_server, "mooncake:num_requests_running") == 0
