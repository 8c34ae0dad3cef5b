"""Engine type "transformers": architectures our engine lacks (Gemma 2, Phi-3), built here as tiny random
models, run through transformers' own continuous batching behind our EngineClient."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from inference.config import EngineConfig
from inference.errors import EngineDeadError, PromptTooLongError, RequestFailedError
from inference.frontends.transformers.engine import TransformersEngine
from inference.models.loader.load import load_model
from inference.models.loader.source import ModelSourceError
from inference.outputs import RequestOutput
from inference.sampling_params import SamplingParams

VOCAB = 49152  # the default model's tokenizer, so text prompts and its chat template work


def _build(kind: str, out_dir: Path, tokenizer_dir: Path) -> Path:
    from transformers import Gemma2Config, Gemma2ForCausalLM, Phi3Config, Phi3ForCausalLM

    common: dict[str, Any] = {
        "vocab_size": VOCAB,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "pad_token_id": 0,
    }
    if kind == "gemma2":
        config: Any = Gemma2Config(head_dim=16, sliding_window=64, **common)
        model: Any = Gemma2ForCausalLM(config)
    else:
        config = Phi3Config(**common)
        model = Phi3ForCausalLM(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.2)
    model.save_pretrained(out_dir)
    for file in tokenizer_dir.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            (out_dir / file.name).write_bytes(file.read_bytes())
    return out_dir


@pytest.fixture(scope="module")
def tiny_foreign(tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path) -> Callable[[str], Path]:
    built: dict[str, Path] = {}

    def make(kind: str) -> Path:
        if kind not in built:
            built[kind] = _build(kind, tmp_path_factory.mktemp(kind), default_model_dir)
        return built[kind]

    return make


def _config(path: Path, **overrides: Any) -> EngineConfig:
    settings: dict[str, Any] = {
        "type": "transformers",
        "model": str(path),
        "dtype": "float32",
        "device": "cpu",
        "max_num_seqs": 8,
        "max_num_batched_tokens": 256,
        "kv_cache_memory_bytes": 8 << 20,
        "seed": 0,
    }
    return EngineConfig.from_dict({**settings, **overrides})


async def _run(engine: TransformersEngine, prompt: str | list[int], params: SamplingParams) -> RequestOutput:
    last = None
    async for out in engine.generate(prompt, params):
        last = out
    assert last is not None and last.finished
    return last


@pytest.fixture(scope="module", params=["gemma2", "phi3"])
def engine_and_dir(request: pytest.FixtureRequest, tiny_foreign: Callable[[str], Path]) -> Any:
    path = tiny_foreign(request.param)
    engine = TransformersEngine.start(_config(path))
    yield engine, path
    engine.shutdown()


def test_native_engine_names_the_transformers_option(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    # GPT-NeoX: an architecture transformers implements and our engine does not.
    config = AutoConfig.for_model(
        "gpt_neox",
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    with pytest.raises(ModelSourceError, match="type: transformers"):
        load_model(str(tmp_path), dtype="float32", device="cpu")


def test_greedy_batch_equals_transformers_generate(engine_and_dir: Any) -> None:
    """Two prompts in one batch, each token for token what model.generate(do_sample=False) gives."""
    from transformers import AutoModelForCausalLM

    engine, path = engine_and_dir
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    prompts = [[17, 400, 9001, 23, 5], [321, 77, 4242]]
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)

    async def both() -> list[RequestOutput]:
        return list(await asyncio.gather(*(_run(engine, p, params) for p in prompts)))

    outputs = asyncio.run(both())
    for prompt, out in zip(prompts, outputs, strict=True):
        with torch.no_grad():
            expected = reference.generate(
                torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=None
            )[0, len(prompt) :].tolist()
        assert out.outputs[0].token_ids == expected
        assert out.outputs[0].finish_reason == "length"
        assert out.outputs[0].text == engine.tokenizer.decode(expected, skip_special_tokens=True)
    assert engine.stats().num_running == 0


def test_stop_strings_stop_token_ids_and_several_choices(engine_and_dir: Any) -> None:
    engine, _ = engine_and_dir
    greedy = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
    full = asyncio.run(_run(engine, "Tell me about the sea", greedy)).outputs[0]
    cut_token = full.token_ids[3]
    by_id_params = SamplingParams(**{**_plain(greedy), "stop_token_ids": [cut_token]})
    by_id = asyncio.run(_run(engine, "Tell me about the sea", by_id_params)).outputs[0]
    assert by_id.token_ids == full.token_ids[: full.token_ids.index(cut_token) + 1]
    assert (by_id.finish_reason, by_id.stop_reason) == ("stop", cut_token)

    stop_text = full.text[len(full.text) // 2 :][:3]
    by_text = asyncio.run(
        _run(engine, "Tell me about the sea", SamplingParams(**{**_plain(greedy), "stop": [stop_text]}))
    ).outputs[0]
    assert stop_text not in by_text.text and full.text.startswith(by_text.text)
    assert (by_text.finish_reason, by_text.stop_reason) == ("stop", stop_text)

    sampled = asyncio.run(
        _run(engine, "Tell me about the sea", SamplingParams(n=3, temperature=1.0, top_p=0.9, max_tokens=6))
    )
    assert sorted(o.index for o in sampled.outputs) == [0, 1, 2]
    assert all(1 <= len(o.token_ids) <= 6 and o.finish_reason is not None for o in sampled.outputs)


def _plain(params: SamplingParams) -> dict[str, Any]:
    return {
        "temperature": params.temperature,
        "max_tokens": params.max_tokens,
        "ignore_eos": params.ignore_eos,
    }


def test_closing_early_cancels_and_the_engine_carries_on(engine_and_dir: Any) -> None:
    engine, _ = engine_and_dir

    async def close_after_two() -> int:
        seen = 0
        stream = engine.generate([5, 6, 7], SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True))
        async for out in stream:
            seen = len(out.outputs[0].token_ids)
            if seen >= 2:
                break
        await stream.aclose()
        return seen

    assert asyncio.run(close_after_two()) >= 2
    assert engine.stats().num_running == 0
    four = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    again = asyncio.run(_run(engine, [5, 6, 7], four))
    assert len(again.outputs[0].token_ids) == 4


def test_abort_ends_the_request_with_reason_abort(engine_and_dir: Any) -> None:
    engine, _ = engine_and_dir

    async def aborted() -> RequestOutput:
        last = None
        async for out in engine.generate(
            [9, 10], SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True), request_id="r-abort"
        ):
            last = out
            if out.outputs[0].token_ids:
                await engine.abort("r-abort")
        assert last is not None
        return last

    out = asyncio.run(aborted())
    assert out.finished and out.outputs[0].finish_reason == "abort"
    assert len(out.outputs[0].token_ids) < 300


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"seed": 3}, "seed"),
        ({"repetition_penalty": 1.2, "min_p": 0.1}, "min_p, repetition_penalty are"),
        ({"logprobs": 2}, "logprobs"),
        ({"logit_bias": {5: 1.0}}, "logit_bias"),
        ({"logits_processors": [lambda ids, logits: logits]}, "response_format"),
    ],
)
def test_parameters_its_sampler_lacks_are_refused_by_name(
    engine_and_dir: Any, params: dict[str, Any], named: str
) -> None:
    engine, _ = engine_and_dir
    with pytest.raises(ValueError, match=named):
        asyncio.run(_run(engine, [1, 2], SamplingParams(max_tokens=2, **params)))


def test_prompts_past_the_context_are_refused(engine_and_dir: Any) -> None:
    engine, _ = engine_and_dir
    with pytest.raises(PromptTooLongError):
        asyncio.run(_run(engine, [5] * 500, SamplingParams(max_tokens=20)))
    with pytest.raises(ValueError, match="prompt token ids"):
        asyncio.run(_run(engine, [VOCAB + 5], SamplingParams(max_tokens=2)))


def test_details_and_memory_are_reported(engine_and_dir: Any) -> None:
    engine, _ = engine_and_dir
    assert engine.model_details["architecture"].endswith("(transformers)")
    assert engine.model_details["num_params"] > 0
    assert engine.kv_capacity_tokens > 0 and engine.memory_bytes > (8 << 20)
    assert engine.max_model_len == 512 and engine.health().state == "ready"
    stats = engine.stats()
    assert stats.kv_capacity_tokens == engine.kv_capacity_tokens and 0.0 <= stats.kv_cache_usage <= 1.0
    ids = engine.apply_chat_template([{"role": "user", "content": "hi"}])
    assert ids and max(ids) < VOCAB


def test_shutdown_fails_running_requests_and_refuses_new_ones(tiny_foreign: Callable[[str], Path]) -> None:
    engine = TransformersEngine.start(_config(tiny_foreign("phi3")))

    async def run_into_shutdown() -> None:
        async for out in engine.generate(
            [3, 4], SamplingParams(temperature=0.0, max_tokens=400, ignore_eos=True)
        ):
            if out.outputs[0].token_ids:
                await asyncio.to_thread(engine.shutdown)

    with pytest.raises(EngineDeadError):
        asyncio.run(run_into_shutdown())
    with pytest.raises(EngineDeadError):
        asyncio.run(_run(engine, [3, 4], SamplingParams(max_tokens=2)))


def _break_forward(engine: TransformersEngine, monkeypatch: pytest.MonkeyPatch, *, times: int) -> None:
    """The model's forward raises the next `times` calls, as a kernel failure would."""
    model = engine._runner.manager.model
    real_forward = model.forward
    left = {"n": times}

    def broken(*args: Any, **kwargs: Any) -> Any:
        if left["n"] > 0:
            left["n"] -= 1
            raise RuntimeError("simulated kernel failure")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", broken)


def _wait(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_failing_step_costs_its_requests_not_the_model(
    tiny_foreign: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers ends its whole loop on any step error; the engine starts a fresh loop at once."""
    engine = TransformersEngine.start(_config(tiny_foreign("gemma2")))
    _break_forward(engine, monkeypatch, times=1)
    three = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    try:
        with pytest.raises(RequestFailedError):
            asyncio.run(_run(engine, [3, 4], three))
        _wait(lambda: engine._runner.restarts == 1)
        out = asyncio.run(_run(engine, [3, 4], three))
        assert len(out.outputs[0].token_ids) == 3 and engine.health().state == "ready"
    finally:
        engine.shutdown()


def test_a_loop_that_keeps_dying_is_a_death(
    tiny_foreign: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = TransformersEngine.start(_config(tiny_foreign("phi3")))
    died = threading.Event()
    engine.set_on_death(lambda e: died.set())
    _break_forward(engine, monkeypatch, times=1000)
    two = SamplingParams(temperature=0.0, max_tokens=2)
    for attempt in range(4):
        with pytest.raises((RequestFailedError, EngineDeadError)):
            asyncio.run(_run(engine, [3, 4], two))
        _wait(lambda n=attempt: engine._runner.restarts > n or died.is_set())
    assert died.wait(10)
    assert engine.health().state == "dead" and "4 times" in (engine.health().error or "")
    with pytest.raises(EngineDeadError):
        asyncio.run(_run(engine, [3, 4], two))
    engine.shutdown()


def test_only_safetensors_and_no_remote_code(tmp_path: Path, tiny_foreign: Callable[[str], Path]) -> None:
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / "config.json").write_text((tiny_foreign("phi3") / "config.json").read_text())
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ModelSourceError, match="pickle"):
        TransformersEngine.start(_config(pickled))

    custom = tmp_path / "custom"
    custom.mkdir()
    for file in tiny_foreign("phi3").iterdir():
        (custom / file.name).write_bytes(file.read_bytes())
    config = json.loads((custom / "config.json").read_text())
    config.update({"model_type": "my_custom_arch", "auto_map": {"AutoModelForCausalLM": "modeling.X"}})
    (custom / "config.json").write_text(json.dumps(config))
    with pytest.raises((ModelSourceError, ValueError), match="my_custom_arch"):
        TransformersEngine.start(_config(custom))


def test_model_roots_are_checked_at_load(tmp_path: Path, tiny_foreign: Callable[[str], Path]) -> None:
    with pytest.raises(ModelSourceError, match="outside the allowed model roots"):
        TransformersEngine.start(_config(tiny_foreign("gemma2"), model_roots=[str(tmp_path)]))


@pytest.mark.slow
def test_the_real_default_model_matches_its_reference(default_model_dir: Path, hf_reference: Any) -> None:
    """The bundled SmolLM2 (its GGUF converted once), fp32, through transformers' batching: greedy chat
    replies equal the reference model.generate, token for token, three at once."""
    engine = TransformersEngine.start(_config(default_model_dir, kv_cache_memory_bytes=64 << 20))
    questions = ["What is the capital of France?", "Name three colours.", "Count to five."]
    prompts = [engine.apply_chat_template([{"role": "user", "content": q}]) for q in questions]
    params = SamplingParams(temperature=0.0, max_tokens=24)

    async def all_three() -> list[RequestOutput]:
        return list(await asyncio.gather(*(_run(engine, p, params) for p in prompts)))

    try:
        outputs = asyncio.run(all_three())
    finally:
        engine.shutdown()
    for prompt, out in zip(prompts, outputs, strict=True):
        with torch.no_grad():
            expected = hf_reference.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False)[
                0, len(prompt) :
            ].tolist()
        got = out.outputs[0]
        assert got.token_ids == expected
        assert got.finish_reason == ("stop" if expected[-1] in engine.eos_token_ids else "length")
        assert got.text.strip()
