"""mooncake.yaml: optional, merged over defaults, validated; and how it becomes an EngineConfig."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from inference import EngineConfig
from webapp.core.engine import build_engine_config, engine_config_dict, served_model_name
from webapp.settings.mooncake_yaml import DEFAULTS, load_mooncake_config

REPO_ROOT = Path(__file__).resolve().parents[3]

SEED = """\
server: {host: 0.0.0.0, port: 9001}
model: {model_id: default, dtype: float32, max_model_len: 1024, gpu_memory_utilization: 0.8}
engine: {type: native, max_num_seqs: 8, max_num_batched_tokens: 512}
api: {openai_compatible: true}
"""


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    assert load_mooncake_config(tmp_path / "absent.yaml") == DEFAULTS
    assert load_mooncake_config(None) == DEFAULTS


def test_seed_format_is_merged_over_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.yaml"
    path.write_text(SEED)
    config = load_mooncake_config(path)
    assert config["server"] == {"host": "0.0.0.0", "port": 9001}
    assert config["model"]["max_model_len"] == 1024
    assert config["engine"]["max_num_seqs"] == 8


def test_partial_file_keeps_other_defaults(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.yaml"
    path.write_text("engine:\n  max_num_seqs: 4\n")
    config = load_mooncake_config(path)
    assert config["server"] == DEFAULTS["server"]
    assert config["engine"] == {"type": "native", "max_num_seqs": 4}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "top level"),
        ("models: {}", "unknown section"),
        ("server: 5", "must be a mapping"),
        ("server: {port: 70000}", "server.port"),
        ("server: {port: '80'}", "server.port"),
        ("server: [unclosed", "not valid YAML"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "mooncake.yaml"
    path.write_text(text)
    with pytest.raises(ImproperlyConfigured, match=message):
        load_mooncake_config(path)


def test_engine_config_from_yaml_sections(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.yaml"
    path.write_text(SEED)
    mooncake = load_mooncake_config(path)
    assert engine_config_dict(mooncake)["max_num_seqs"] == 8
    config = build_engine_config(mooncake)
    assert isinstance(config, EngineConfig)
    assert (config.model, config.dtype, config.max_model_len) == ("default", "float32", 1024)
    assert config.max_num_seqs == 8
    assert config.gpu_memory_utilization == 0.8


def test_served_model_name() -> None:
    base: dict[str, dict[str, Any]] = {"server": {}, "engine": {}, "api": {}}
    assert served_model_name({**base, "model": {"model_id": "default"}}) == "SmolLM2-135M-Instruct"
    assert served_model_name({**base, "model": {"model_id": "/models/Qwen2-0.5B"}}) == "Qwen2-0.5B"
    assert served_model_name({**base, "model": {"model_id": "/m/tiny.Q8_0.gguf"}}) == "tiny.Q8_0"
    assert served_model_name({**base, "model": {"model_id": "default", "name": "chat"}}) == "chat"


def _settings_in_subprocess(env: dict[str, str], expr: str) -> object:
    code = f"import json, django; django.setup(); from django.conf import settings; print(json.dumps({expr}))"
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("MOONCAKE_")}
    full_env = {**inherited, "DJANGO_SETTINGS_MODULE": "webapp.settings.local", **env}
    out = subprocess.run(
        [sys.executable, "-c", code], env=full_env, cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_settings_read_the_file_named_by_mooncake_config(tmp_path: Path) -> None:
    path = tmp_path / "mooncake.yaml"
    path.write_text(SEED)
    env = {"MOONCAKE_CONFIG": str(path), "MOONCAKE_DATA": str(tmp_path / "data")}
    mooncake = _settings_in_subprocess(env, "settings.MOONCAKE")
    assert isinstance(mooncake, dict)
    assert mooncake["server"]["port"] == 9001
    assert mooncake["engine"]["max_num_batched_tokens"] == 512


def test_data_dir_layout_and_local_defaults(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {"MOONCAKE_DATA": str(data), "MOONCAKE_MODEL_ROOTS": os.pathsep.join(["/srv/a", "/srv/b"])}
    values = _settings_in_subprocess(
        env,
        "[str(settings.DATABASES['default']['NAME']), str(settings.CACHE_DIR),"
        " [str(p) for p in settings.MODEL_ROOTS], settings.MOONCAKE_API_AUTH, settings.CELERY_BROKER_URL,"
        " settings.CHANNEL_LAYERS['default']['BACKEND']]",
    )
    assert values == [
        str(data / "mooncake.sqlite3"),
        str(data / "cache"),
        ["/srv/a", "/srv/b"],
        "off",
        "filesystem://",
        "channels.layers.InMemoryChannelLayer",
    ]
    assert (data / "secret_key").is_file()
    assert (data / "celery" / "queue").is_dir()


def test_redis_urls_switch_channel_layer_and_broker(tmp_path: Path) -> None:
    env = {
        "MOONCAKE_DATA": str(tmp_path / "data"),
        "REDIS_URL": "redis://redis:6379/0",
        "CELERY_BROKER_URL": "redis://redis:6379/1",
    }
    values = _settings_in_subprocess(
        env, "[settings.CHANNEL_LAYERS['default']['BACKEND'], settings.CELERY_BROKER_TRANSPORT_OPTIONS]"
    )
    assert values == ["channels_redis.core.RedisChannelLayer", {}]
