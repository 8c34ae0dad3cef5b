"""The configuration resolver: defaults, environment and mooncake.yaml, validated once, each value with its
source; and how the file becomes an EngineConfig."""

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
from webapp.core.config import YAML_DEFAULTS as DEFAULTS
from webapp.core.config import load_mooncake_config, resolve_settings
from webapp.serving.engine import build_engine_config, engine_config_dict, served_model_name

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
        ("server: {drain_timeout: '5'}", "server.drain_timeout"),
        ("server: {drain_timeout: -1}", "server.drain_timeout"),
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


def _resolve(tmp_path: Path, env: dict[str, str], yaml_text: str | None = None, **kwargs: Any) -> Any:
    """resolve_settings over an environment of our own, in a folder with no mooncake.yaml of its own."""
    if yaml_text is not None:
        (tmp_path / "mooncake.yaml").write_text(yaml_text)
    environ = {"MOONCAKE_DATA": str(tmp_path / "data"), **env}
    return resolve_settings(environ, base_dir=tmp_path / "checkout", cwd=tmp_path, **kwargs)


def test_every_value_records_its_source(tmp_path: Path) -> None:
    resolved = _resolve(tmp_path, {"MOONCAKE_DRAIN_TIMEOUT": "12", "MOONCAKE_API_AUTH": " OFF "})
    server, sources = resolved.server, resolved.sources
    assert sources["drain_timeout"].describe() == "env (MOONCAKE_DRAIN_TIMEOUT)"
    # The validated value, not the variable's text.
    assert server.drain_timeout == sources["drain_timeout"].value == 12.0
    assert (server.api_auth, sources["api_auth"].source) == ("off", "env")
    assert (server.port, sources["port"].source) == (8000, "default")
    assert (server.data_dir, sources["data_dir"].source) == ((tmp_path / "data").resolve(), "env")
    assert server.cache_dir == (tmp_path / "data").resolve() / "cache"
    assert sources["cache_dir"].source == "default"
    assert server.config_file is None and resolved.yaml == DEFAULTS


def test_yaml_goes_over_the_environment(tmp_path: Path) -> None:
    resolved = _resolve(
        tmp_path, {"MOONCAKE_DRAIN_TIMEOUT": "12"}, "server: {port: 9001, drain_timeout: 7.5}\n"
    )
    assert resolved.server.config_file == tmp_path / "mooncake.yaml"
    assert resolved.sources["drain_timeout"].describe() == "yaml (server.drain_timeout)"
    assert (resolved.server.drain_timeout, resolved.server.port) == (7.5, 9001)
    assert resolved.yaml["server"] == {"host": "127.0.0.1", "port": 9001, "drain_timeout": 7.5}
    assert resolved.yaml_keys == {"server.port", "server.drain_timeout"}


def test_a_settings_modules_defaults_and_file_discovery(tmp_path: Path) -> None:
    (tmp_path / "mooncake.yaml").write_text("server: {port: 9001}\n")
    resolved = _resolve(tmp_path, {}, defaults={"api_auth": "off"}, discover=False)
    assert (resolved.server.api_auth, resolved.sources["api_auth"].source) == ("off", "default")
    assert resolved.server.config_file is None and resolved.server.port == 8000
    named = _resolve(tmp_path, {"MOONCAKE_CONFIG": str(tmp_path / "mooncake.yaml")}, discover=False)
    assert named.server.port == 9001 and named.sources["config_file"].source == "env"


def test_blank_variables_are_unset_and_roots_split_on_pathsep(tmp_path: Path) -> None:
    roots = os.pathsep.join(["/srv/a", " ", "/srv/b"])
    resolved = _resolve(tmp_path, {"MOONCAKE_AUTOLOAD": "  ", "MOONCAKE_MODEL_ROOTS": roots})
    assert resolved.server.autoload is True and resolved.sources["autoload"].source == "default"
    assert resolved.server.model_roots == (Path("/srv/a"), Path("/srv/b"))


def test_engine_variables_are_kept_for_every_model(tmp_path: Path) -> None:
    resolved = _resolve(tmp_path, {"MOONCAKE_CPU_THREADS": "2", "CXX": "g++-13"})
    assert {k: (s.value, s.origin) for k, s in resolved.engine_env.items()} == {
        "cpu_threads": ("2", "MOONCAKE_CPU_THREADS"),
        "kernel_compiler": ("g++-13", "CXX"),
    }


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"MOONCAKE_DRAIN_TIMEOUT": "soon"}, "MOONCAKE_DRAIN_TIMEOUT='soon'"),
        ({"MOONCAKE_DRAIN_TIMEOUT": "-1"}, "MOONCAKE_DRAIN_TIMEOUT"),
        ({"MOONCAKE_API_AUTH": "maybe"}, "MOONCAKE_API_AUTH='maybe'"),
        ({"MOONCAKE_AUTOLOAD": "perhaps"}, "MOONCAKE_AUTOLOAD"),
        ({"MOONCAKE_API_REQUEST_TIMEOUT": "0"}, "MOONCAKE_API_REQUEST_TIMEOUT"),
        ({"MOONCAKE_CPU_THREADS": "many"}, "MOONCAKE_CPU_THREADS='many'"),
        ({"MOONCAKE_CPU_THREADS": "0"}, "MOONCAKE_CPU_THREADS"),
    ],
)
def test_bad_values_name_their_variable(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        _resolve(tmp_path, env)


def test_console_overrides_go_on_top_and_are_validated(tmp_path: Path) -> None:
    resolved = _resolve(tmp_path, {"MOONCAKE_DRAIN_TIMEOUT": "12"})
    over = resolved.overlay({"drain_timeout": 5}, source="console", origin="tuning page")
    assert over.server.drain_timeout == 5.0
    assert over.sources["drain_timeout"].describe() == "console (tuning page)"
    assert resolved.server.drain_timeout == 12.0  # the overlay is a new object
    with pytest.raises(ImproperlyConfigured, match="tuning page"):
        resolved.overlay({"drain_timeout": -1}, source="console", origin="tuning page")


def test_settings_are_built_from_the_resolver(tmp_path: Path) -> None:
    env = {"MOONCAKE_DATA": str(tmp_path / "data"), "MOONCAKE_DRAIN_TIMEOUT": "9"}
    values = _settings_in_subprocess(
        env,
        "[settings.MOONCAKE_DRAIN_TIMEOUT, settings.MOONCAKE_SETTINGS.sources['drain_timeout'].source,"
        " settings.MOONCAKE_API_AUTH, settings.MOONCAKE_SETTINGS.server.api_auth]",
    )
    assert values == [9.0, "env", "off", "off"]
