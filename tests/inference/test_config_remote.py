"""engine.type and the `openai` engine's settings: validated with errors that name the key; the request
body and error mapping of inference.frontends.remote.upstream, without a server
(tests/webapp/test_openai_engine.py runs one)."""

from __future__ import annotations

import pytest

from inference import EngineConfig, SamplingParams
from inference.errors import UpstreamRejectedError, UpstreamUnavailableError
from inference.frontends.remote.outputs import ChoiceState
from inference.frontends.remote.upstream import completion_body, error_for_status, parse_logprobs

UPSTREAM = {"type": "openai", "base_url": "http://vllm:8000/v1"}


def test_openai_type_with_its_settings() -> None:
    config = EngineConfig.from_dict(
        {**UPSTREAM, "api_key": "sk-secret", "upstream_model": "Qwen/Qwen2.5-7B", "request_timeout": "30"}
    )
    assert (config.engine_type, config.base_url, config.upstream_model) == (
        "openai",
        "http://vllm:8000/v1",
        "Qwen/Qwen2.5-7B",
    )
    assert config.request_timeout == 30.0 and config.api_key == "sk-secret"
    assert "sk-secret" not in repr(config)  # configs are logged; the key must not be
    assert EngineConfig().engine_type == "native"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"type": "openai"}, "base_url is required for engine type 'openai'"),
        ({**UPSTREAM, "base_url": "ftp://vllm:8000/v1"}, "base_url must be an http:// or https:// URL"),
        ({**UPSTREAM, "base_url": "vllm:8000/v1"}, "base_url must be an http:// or https:// URL"),
        ({**UPSTREAM, "base_url": "http:///v1"}, "with a host"),
        ({**UPSTREAM, "request_timeout": 0}, "request_timeout must be > 0"),
        (
            {"type": "magic"},
            r"engine type must be one of \('native', 'transformers', 'openai', 'vllm', 'sglang', 'tgi'\)",
        ),
        ({"base_url": "http://vllm:8000/v1"}, "base_url only apply to engine type 'openai'"),
        ({"api_key": "sk"}, "api_key only apply to engine type 'openai'"),
        ({**UPSTREAM, "api_key_env": "KEY"}, "unknown engine setting"),  # the web layer resolves it
    ],
)
def test_bad_settings_name_the_key(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig.from_dict(settings)


def test_a_blank_upstream_model_is_refused() -> None:
    with pytest.raises(ValueError, match="upstream_model must not be empty"):
        EngineConfig(engine_type="openai", base_url="http://vllm:8000/v1", upstream_model=" ")


@pytest.mark.parametrize("kind", ["vllm", "sglang", "tgi"])
def test_child_process_engines_take_their_server_settings(kind: str) -> None:
    config = EngineConfig.from_dict({"type": kind, "tensor_parallel_size": "2", "executable": "/opt/x"})
    assert (config.engine_type, config.tensor_parallel_size, config.executable) == (kind, 2, "/opt/x")
    assert config.base_url is None  # Mooncake starts the server and picks its address


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_expert_parallel_from_the_environment_is_a_bool(kind: str) -> None:
    assert EngineConfig.from_dict({"type": kind, "expert_parallel": "true"}).server().expert_parallel is True
    assert EngineConfig.from_dict({"type": kind, "expert_parallel": "0"}).expert_parallel is False
    assert EngineConfig.from_dict({"type": "tgi", "expert_parallel": "false"}).expert_parallel is False
    with pytest.raises(ValueError, match="expert_parallel must be true or false"):
        EngineConfig(engine_type=kind, expert_parallel="yes")  # type: ignore[arg-type]


def test_transformers_engine_type_is_in_process_and_refuses_upstream_settings() -> None:
    config = EngineConfig.from_dict({"type": "transformers", "model": "/models/gemma", "dtype": "float32"})
    assert (config.engine_type, config.base_url) == ("transformers", None)
    with pytest.raises(ValueError, match=r"only apply to engine type 'openai'.*'transformers'"):
        EngineConfig.from_dict({"type": "transformers", "upstream_model": "x"})
    with pytest.raises(ValueError, match="quantization 'int4' applies to engine type 'native' only"):
        EngineConfig.from_dict({"type": "transformers", "quantization": "gguf"})


def test_completion_body_sends_token_ids_and_only_the_extras_asked_for() -> None:
    plain = completion_body("m", [1, 2, 3], SamplingParams(max_tokens=8, temperature=0.0))
    assert plain == {
        "model": "m",
        "prompt": [1, 2, 3],
        "stream": True,
        "stream_options": {"include_usage": True},
        "n": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 8,
    }
    params = SamplingParams(
        n=3,
        top_k=5,
        min_p=0.1,
        repetition_penalty=1.2,
        seed=7,
        stop=["\n"],
        logit_bias={4: -100.0},
        logprobs=2,
    )
    body = completion_body("m", [1], params, index=2)
    assert body["n"] == 1 and body["seed"] == 9  # one upstream request per choice, each its own seed
    assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (5, 0.1, 1.2)
    assert body["stop"] == ["\n"] and body["logit_bias"] == {"4": -100.0} and body["logprobs"] == 2


@pytest.mark.parametrize("status", [400, 413, 422])
def test_upstream_verdicts_on_the_request_are_rejections(status: int) -> None:
    content = b'{"error": {"message": "max_tokens is too large", "param": "max_tokens", "type": "x"}}'
    error = error_for_status(status, content, {})
    assert isinstance(error, UpstreamRejectedError)
    assert (str(error), error.param, error.status) == ("max_tokens is too large", "max_tokens", status)


@pytest.mark.parametrize(
    ("status", "content"),
    [
        (401, b'{"error": "bad key"}'),  # TGI's shape
        (404, b'{"detail": "Not Found"}'),  # FastAPI's
        (429, b"slow down"),
        (500, b'{"message": "CUDA error"}'),
        (503, b""),
    ],
)
def test_other_statuses_mean_unavailable(status: int, content: bytes) -> None:
    error = error_for_status(status, content, {"retry-after": "7"})
    assert isinstance(error, UpstreamUnavailableError) and error.retry_after == 7.0
    assert str(status) in str(error)


def test_legacy_logprobs_become_entries() -> None:
    entries = parse_logprobs(
        {
            "tokens": ["Hi", "!"],
            "token_logprobs": [-0.5, None],
            "top_logprobs": [{"Hi": -0.5, "Yo": -1.5}, None],
        }
    )
    (chosen, alternatives), (second, none) = entries
    assert (chosen.token, chosen.logprob) == ("Hi", -0.5)
    assert [a.token for a in alternatives] == ["Hi", "Yo"]
    assert second.token == "!" and second.logprob == float("-inf") and none == []


class _Chars:
    """A tokenizer with one token per character."""

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return [ord(ch) for ch in text]


def test_a_choice_finishes_when_its_stream_ends_with_the_upstream_count() -> None:
    choice = ChoiceState(0)
    assert choice.apply({"choices": [{"text": "ab", "finish_reason": None}]}, _Chars(), {2}, logprobs=None)
    assert not choice.apply(
        {"choices": [{"text": "", "finish_reason": "stop"}]}, _Chars(), {2}, logprobs=None
    )
    assert choice.finish_reason is None  # held: the usage event comes after
    choice.apply({"choices": [], "usage": {"completion_tokens": 3}}, _Chars(), {2}, logprobs=None)
    assert choice.apply({"done": True}, _Chars(), {2}, logprobs=None)
    out = choice.output(logprobs=False)
    assert (out.text, out.token_ids, out.finish_reason) == ("ab", [97, 98, 2], "stop")  # the EOS left no text
    assert (out.delta_text, out.delta_token_ids) == ("ab", [97, 98, 2])
    assert choice.output(logprobs=False).delta_token_ids == []  # what was sent is not sent again
