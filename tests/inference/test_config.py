import pytest

from inference import EngineConfig, SamplingParams
from inference.config import SchedulerConfig


def test_from_dict_merges_yaml_sections_and_coerces_strings():
    cfg = EngineConfig.from_dict(
        {
            "model_id": "default",
            "max_model_len": "8192",
            "type": "native",
            "max_num_seqs": "8",
            "enable_prefix_caching": "false",
            "gpu_memory_utilization": "0.5",
            "kv_cache_memory_bytes": "",
        }
    )
    assert cfg.model == "default" and cfg.max_model_len == 8192 and cfg.max_num_seqs == 8
    assert cfg.enable_prefix_caching is False and cfg.gpu_memory_utilization == 0.5
    assert cfg.kv_cache_memory_bytes is None


@pytest.mark.parametrize(
    "bad",
    [
        {"dtype": "int3"},
        {"block_size": 0},
        {"gpu_memory_utilization": 1.5},
        {"device": "tpu"},
        {"max_num_seqs": -1},
        {"attention_backend": "magic"},
        {"bogus": 1},
        {"type": "transformers", "quantization": "gguf"},
        {"type": "transformers", "base_url": "http://h/v1"},
        {"type": "vllm", "base_url": "http://h/v1"},
        {"max_num_seqs": "many"},
    ],
)
def test_bad_values_raise_clear_value_errors(bad):
    with pytest.raises(ValueError):
        EngineConfig.from_dict(bad)


def test_scheduler_config_without_chunking_needs_room_for_a_whole_prompt():
    with pytest.raises(ValueError, match="enable_chunked_prefill"):
        SchedulerConfig(max_num_batched_tokens=512, max_model_len=2048, enable_chunked_prefill=False)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"n": 0},
        {"temperature": -1},
        {"top_p": 0},
        {"top_k": -2},
        {"min_p": 2},
        {"presence_penalty": 3},
        {"repetition_penalty": 0},
        {"max_tokens": 0},
        {"min_tokens": 5, "max_tokens": 2},
        {"logprobs": 21},
        {"stop": [""]},
        {"logit_bias": {1: 500}},
    ],
)
def test_sampling_params_validation(kwargs):
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_sampling_params_accepts_a_bare_stop_string():
    assert SamplingParams(stop="###").stop == ["###"]
    assert SamplingParams(temperature=0).is_greedy and SamplingParams(top_k=0).effective_top_k == 0


def test_gpu_settings_from_yaml_strings():
    cfg = EngineConfig.from_dict({"attention_backend": "triton", "enforce_eager": "true"})
    assert cfg.attention_backend == "triton" and cfg.enforce_eager is True
    assert EngineConfig().enforce_eager is False  # CUDA graphs on by default
    with pytest.raises(ValueError, match="enforce_eager"):
        EngineConfig.from_dict({"enforce_eager": "sometimes"})


def test_each_engine_type_reads_its_own_settings_and_check_names_the_rest() -> None:
    from inference.config import ENGINE_TYPES, REMOTE_FIELDS, fields_read_by, settings_not_read

    for kind in ENGINE_TYPES:
        assert {"model", "max_model_len", "max_queue_len"} <= fields_read_by(kind)
    assert not fields_read_by("native") & set(REMOTE_FIELDS)
    assert "block_size" not in fields_read_by("transformers")  # transformers pages its own cache
    assert {"tensor_parallel_size", "gpu_memory_utilization", "max_num_seqs"} <= fields_read_by("vllm")
    remote = EngineConfig(engine_type="openai", base_url="http://h:1/v1", dtype="bfloat16", seed=0)
    # dtype is set and never read (the weights are upstream); seed is given but equals the default.
    assert settings_not_read(remote, ["dtype", "seed", "base_url"]) == ["dtype"]
    assert settings_not_read(EngineConfig(block_size=32), ["block_size"]) == []


def test_remote_and_server_settings_are_typed_groups_of_the_flat_config() -> None:
    import dataclasses

    from inference.config import ENGINE_TYPES, fields_read_by
    from inference.config_groups import REMOTE_SETTINGS, SERVER_SETTINGS, RemoteSettings, ServerSettings

    remote = EngineConfig(engine_type="openai", base_url="http://h:1/v1", api_key="k", upstream_model="m")
    assert remote.remote() == RemoteSettings("http://h:1/v1", "k", "m", 600.0)
    assert "k" not in repr(remote.remote())  # the key stays out of reprs and logs
    served = EngineConfig(engine_type="vllm", tensor_parallel_size=2, startup_timeout=60)
    assert served.server() == ServerSettings(2, 1, None, 60.0)
    assert served.remote().base_url is None  # Mooncake picks the address of a server it starts
    # Each group checks its own settings, so the flat config's errors name them.
    with pytest.raises(ValueError, match="startup_timeout"):
        EngineConfig(engine_type="sglang", startup_timeout=0)
    with pytest.raises(ValueError, match="base_url must be an http"):
        EngineConfig(engine_type="openai", base_url="ftp://h/v1")
    with pytest.raises(ValueError, match="executable must not be empty"):
        ServerSettings(executable=" ")
    # What a type reads is its groups: `openai` the RemoteSettings, a supervised type its ServerSettings
    # without the address and key; every setting is read by some type.
    common = fields_read_by("openai") & fields_read_by("transformers")
    assert fields_read_by("openai") - common == set(REMOTE_SETTINGS)
    assert set(SERVER_SETTINGS) <= fields_read_by("tgi") and not {"base_url", "api_key"} & fields_read_by(
        "tgi"
    )
    every = {f.name for f in dataclasses.fields(EngineConfig)}
    assert set().union(*(fields_read_by(kind) for kind in ENGINE_TYPES)) == every


def test_a_batch_must_hold_one_token_of_every_sequence_for_in_process_types() -> None:
    for kind in ("native", "transformers"):
        with pytest.raises(ValueError, match=r"max_num_batched_tokens \(32\) must be >= max_num_seqs \(64\)"):
            EngineConfig(engine_type=kind, max_num_batched_tokens=32)
    # An upstream's own scheduler decides there (and `mooncake check` refuses the unread settings).
    EngineConfig(engine_type="openai", base_url="http://h:1/v1", max_num_batched_tokens=32)


def test_kv_cache_dtype_is_checked_when_the_config_is_built() -> None:
    assert EngineConfig().kv_cache_dtype == "auto"
    assert EngineConfig.from_dict({"kv_cache_dtype": "float16"}).cache_config().kv_cache_dtype == "float16"
    expected = r"kv_cache_dtype must be one of auto, float32, bfloat16, float16 .*'f16'"
    with pytest.raises(ValueError, match=expected):
        EngineConfig(kv_cache_dtype="f16")
    # transformers' own batching keeps its cache in the compute dtype: check says the setting is not read.
    from inference.config import settings_not_read

    config = EngineConfig(engine_type="transformers", kv_cache_dtype="float16")
    assert settings_not_read(config, ["kv_cache_dtype"]) == ["kv_cache_dtype"]
