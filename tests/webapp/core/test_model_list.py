"""mooncake.yaml's `model.models`: checked naming the wrong key, registered in order, planned for memory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.exceptions import ImproperlyConfigured

from tests.live_server import shared_cache_dir
from webapp.core.config import load_mooncake_config, resolve_settings
from webapp.core.model_list import listed_models

REPO_ROOT = Path(__file__).resolve().parents[3]
TWO = {
    "model": {
        "dtype": "float32",
        "models": [
            {"id": "smol-fp32", "model_id": "default"},
            # Blocks only: the same weights on every CPU kind (or dense bf16 where the kernels cannot run).
            {
                "id": "smol-bf16",
                "model_path": "default",
                "dtype": "bfloat16",
                "gguf_dense_copy": False,
                "default": True,
            },
        ],
    }
}


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "mooncake.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _settings(tmp_path: Path, config: dict[str, Any]) -> Any:
    path = _write(tmp_path, config)
    env = {"MOONCAKE_DATA": str(tmp_path), "MOONCAKE_CONFIG": str(path)}
    return resolve_settings(env, base_dir=tmp_path, cwd=tmp_path)


def _entry(**values: Any) -> dict[str, Any]:
    return {"id": "m", "model_id": "default", **values}


@pytest.mark.parametrize(
    ("model", "engine", "message"),
    [
        ({"models": []}, {}, "model.models must be a non-empty list"),
        ({"models": [_entry(dtype="float8")]}, {}, r"model.models\[0\].dtype: dtype must be one of"),
        ({"models": [_entry(), _entry(id="n", max_model_len=-1)]}, {}, r"model.models\[1\].max_model_len"),
        ({"models": [_entry(), _entry(id="n", gpu_memory_utilization=2)]}, {}, r"\[1\].gpu_memory_util"),
        ({"models": [_entry(colour="blue")]}, {}, r"model.models\[0\].colour is not a setting"),
        ({"models": [{"model_id": "default"}]}, {}, r"model.models\[0\].id is required"),
        ({"models": [{"id": "m"}]}, {}, r"model.models\[0\] needs exactly one of model_id or model_path"),
        ({"models": [_entry(model_path="/x")]}, {}, "exactly one of model_id or model_path"),
        ({"models": [_entry(default="yes")]}, {}, r"model.models\[0\].default must be true or false"),
        ({"models": [_entry(), _entry()]}, {}, r"model.models\[1\]: the name 'm' is already taken"),
        ({"models": [_entry(default=True), _entry(id="n", default=True)]}, {}, "more than one entry"),
        ({"models": [_entry(base_url="http://up:8000/v1")]}, {}, r"model.models\[0\]: base_url only apply"),
        ({"model_id": "default", "models": [_entry()]}, {}, "model.model_id name one model"),
        ({"model_id": "default", "model_path": "/x"}, {}, "model.model_id and model.model_path are both set"),
        ({"models": [_entry(), _entry(id="n")]}, {"enable_multi_model_serving": False}, "is false but"),
        (
            {},
            {"enable_multi_model_serving": "yes"},
            "engine.enable_multi_model_serving must be true or false",
        ),
    ],
)
def test_mistakes_name_the_key(tmp_path: Path, model: Any, engine: Any, message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        _settings(tmp_path, {"model": model, "engine": engine})


def test_the_guides_list_is_accepted_and_one_model_may_say_multi_false(tmp_path: Path) -> None:
    guide = {
        "model": {
            "models": [
                {"id": "qwen-7b", "model_id": "Qwen/Qwen2.5-7B-Instruct", "dtype": "bfloat16"},
                {"id": "llama-8b", "model_id": "/m/llama", "gpu_memory_utilization": 0.85},
            ]
        },
        "engine": {"enable_multi_model_serving": True},
    }
    assert [m.name for m in listed_models(_settings(tmp_path, guide).yaml)] == ["qwen-7b", "llama-8b"]
    one = {"model": {"models": [_entry()]}, "engine": {"enable_multi_model_serving": False}}
    assert [m.name for m in listed_models(_settings(tmp_path, one).yaml)] == ["m"]


def test_the_first_is_the_default_unless_one_says_so(tmp_path: Path) -> None:
    listed = listed_models(load_mooncake_config(_write(tmp_path, TWO)))
    assert [(m.name, m.key, m.default) for m in listed] == [
        ("smol-fp32", "model.models[0]", False),
        ("smol-bf16", "model.models[1]", True),
    ]
    plain = {"model": {"models": [_entry(), _entry(id="n")]}}
    assert [m.default for m in listed_models(load_mooncake_config(_write(tmp_path, plain)))] == [True, False]


def test_entries_override_the_sections_and_say_where(settings: Any, tmp_path: Path) -> None:
    from webapp.serving.engine import resolve_builtin_engine

    settings.MOONCAKE_SETTINGS = _settings(tmp_path, TWO)
    settings.MOONCAKE = settings.MOONCAKE_SETTINGS.yaml
    first, second = listed_models(settings.MOONCAKE)
    fp32 = resolve_builtin_engine(settings.MOONCAKE, first)
    bf16 = resolve_builtin_engine(settings.MOONCAKE, second)
    assert (fp32.config.model, fp32.config.dtype) == ("default", "float32")
    assert fp32.sources["dtype"].describe() == "yaml (model.dtype)"
    assert (bf16.config.model, bf16.config.dtype) == ("default", "bfloat16")
    assert bf16.sources["dtype"].describe() == "yaml (model.models[1].dtype)"
    assert bf16.sources["model"].describe() == "yaml (model.models[1].model_path)"


def test_model_path_is_a_synonym_in_the_single_form(settings: Any, tmp_path: Path) -> None:
    from webapp.serving.engine import build_engine_config, served_model_name

    settings.MOONCAKE_SETTINGS = _settings(tmp_path, {"model": {"model_path": "/m/tiny.gguf"}})
    settings.MOONCAKE = settings.MOONCAKE_SETTINGS.yaml
    assert build_engine_config(settings.MOONCAKE).model == "/m/tiny.gguf"
    assert served_model_name(settings.MOONCAKE) == "tiny"


def test_the_manager_registers_every_listed_model_in_order(settings: Any, tmp_path: Path) -> None:
    from webapp.serving.engine import build_manager

    settings.MOONCAKE_SETTINGS = _settings(tmp_path, TWO)
    settings.MOONCAKE = settings.MOONCAKE_SETTINGS.yaml
    manager = build_manager(on_loaded=lambda engine: None)
    assert [(i.name, i.aliases) for i in manager.list()] == [("smol-fp32", []), ("smol-bf16", ["default"])]
    assert manager.default_name == "smol-bf16" and manager.resolve("default") == "smol-bf16"


def test_the_bundled_model_is_estimated_from_its_header() -> None:
    from inference.config import EngineConfig
    from inference.manager.footprint import DeviceFacts, estimate, read_shape
    from webapp.core.modelpaths import default_model_file

    path = default_model_file()
    assert path is not None
    shape = read_shape(path)
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim, shape.context_length) == (30, 3, 64, 8192)
    assert 130e6 < shape.num_params < 140e6
    cpu = DeviceFacts("cpu", total_bytes=64 << 30, available_bytes=32 << 30, auto_dtype_bytes=4)
    fp32 = estimate("a", "model.models[0]", EngineConfig(dtype="float32", max_model_len=512), shape, cpu)
    assert fp32.weights_bytes == shape.num_params * 4
    assert fp32.kv_bytes_per_token == 2 * 30 * 3 * 64 * 4
    # One full context and 64 tokens for each of the other 63 sequences (kv_budget's rule).
    assert fp32.kv_bytes == (512 + 63 * 64) * fp32.kv_bytes_per_token
    bf16 = estimate("b", "model.models[1]", EngineConfig(dtype="bfloat16"), shape, cpu)
    assert bf16.weights_bytes == shape.num_params * 2
    assert bf16.kv_bytes == (8192 + 63 * 64) * 2 * 30 * 3 * 64 * 2


def test_check_names_the_model_that_does_not_fit_and_what_would(tmp_path: Path) -> None:
    config = _write(tmp_path, TWO)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    # smol-fp32 plans 1.10 GB (weights and its KV cache by the CPU default's rule); smol-bf16's 0.43 GB (0.55
    # where its kernels cannot run) leaves it short, with room for a shorter max_model_len on either CPU.
    env |= {"MOONCAKE_DATA": str(tmp_path / "data"), "MOONCAKE_MEMORY_BUDGET_BYTES": str(15 * 10**8)}
    env["MOONCAKE_CACHE_DIR"] = str(shared_cache_dir())  # the installed kernels: a fresh cache compiles them
    result = subprocess.run(
        [sys.executable, "-m", "webapp.cli", "check", "--config", str(config)],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "engine: smol-fp32 (mooncake.yaml's model.models[0], as the server starts it)" in result.stdout
    assert "model:        smol-bf16 <- " in result.stdout
    problem = next(line for line in result.stderr.splitlines() if "does not fit" in line)
    assert problem.startswith("PROBLEM: smol-bf16 (model.models[1]) does not fit")
    assert "more than the 1.40 GiB that the memory budget" in problem
    assert "Set model.models[1].max_model_len to" in problem
    assert "Set model.models[1].kv_cache_memory_bytes to" in problem
