"""Engine types vllm, sglang, tgi in the web layer: the guide's yaml resolves (its settings known), `mooncake
check` says when the engine is not installed and how to install it, and the composition root finds the
command on PATH (or engine.executable) and starts the supervised engine with it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inference import EngineConfig
from tests.fake_engine_server import install
from webapp.core.config import resolve_settings
from webapp.serving.config_report import config_report
from webapp.serving.engine import resolve_builtin_engine, start_engine
from webapp.serving.engine_servers import EngineNotInstalledError, not_installed_problem, server_executable

GUIDE = (
    "engine: {type: vllm, tensor_parallel_size: 1, max_num_seqs: 16}\n"
    "model: {model_id: Qwen/Qwen2.5-7B-Instruct, dtype: bfloat16, max_model_len: 8192,"
    " gpu_memory_utilization: 0.9}\n"
)
VLLM_MISSING = "engine.type vllm: the vllm command is not installed (pip install vllm; it needs a CUDA GPU)"


def _use(settings: Any, tmp_path: Path, yaml_text: str) -> None:
    (tmp_path / "mooncake.yaml").write_text(yaml_text)
    resolved = resolve_settings(
        {"MOONCAKE_DATA": str(tmp_path / "data")}, base_dir=tmp_path / "checkout", cwd=tmp_path
    )
    settings.MOONCAKE_SETTINGS = resolved
    settings.MOONCAKE = resolved.yaml


@pytest.fixture
def empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    return folder


@pytest.mark.database
def test_the_guide_yaml_resolves_and_check_says_vllm_is_missing(
    db: None, settings: Any, tmp_path: Path, empty_path: Path
) -> None:
    _use(settings, tmp_path, GUIDE)
    config = resolve_builtin_engine(settings.MOONCAKE).config
    assert (config.engine_type, config.tensor_parallel_size, config.max_num_seqs) == ("vllm", 1, 16)
    assert (config.dtype, config.max_model_len, config.gpu_memory_utilization) == ("bfloat16", 8192, 0.9)
    report = config_report()
    assert VLLM_MISSING in report.problems
    assert not any("unknown" in problem for problem in report.problems)
    assert any(line.split()[:2] == ["tensor_parallel_size", "1"] for line in report.lines)


@pytest.mark.database
def test_check_is_quiet_once_the_command_is_on_path(
    db: None, settings: Any, tmp_path: Path, empty_path: Path
) -> None:
    install(empty_path, "vllm", tmp_path / "argv.jsonl")
    _use(settings, tmp_path, GUIDE)
    assert VLLM_MISSING not in config_report().problems
    assert server_executable(EngineConfig(engine_type="vllm")) == str(empty_path / "vllm")


@pytest.mark.database
def test_check_refuses_settings_the_engine_type_never_reads(
    db: None, settings: Any, tmp_path: Path, empty_path: Path
) -> None:
    install(empty_path, "vllm", tmp_path / "argv.jsonl")
    extra = "max_num_seqs: 16, block_size: 32, max_num_batched_tokens: 8192, max_step_latency_ms: 100}"
    _use(settings, tmp_path, GUIDE.replace("max_num_seqs: 16}", extra))
    problems = config_report().problems
    unread = [p for p in problems if "never reads" in p]
    # block_size and max_num_batched_tokens are ours alone: vLLM's server never gets them. A value equal
    # to the default (max_step_latency_ms) changes nothing either way and is let be.
    assert len(unread) == 1, problems
    assert unread[0].endswith(
        ": block_size, max_num_batched_tokens do not apply to engine type 'vllm', which never reads them "
        "(set in yaml (engine.block_size), yaml (engine.max_num_batched_tokens)); remove them"
    )
    _use(settings, tmp_path, GUIDE)
    assert not any("never reads" in p for p in config_report().problems)


@pytest.mark.database
def test_expert_parallel_from_the_yaml_reaches_the_config_and_check(
    db: None, settings: Any, tmp_path: Path, empty_path: Path
) -> None:
    install(empty_path, "vllm", tmp_path / "argv.jsonl")
    _use(settings, tmp_path, GUIDE.replace("max_num_seqs: 16}", "max_num_seqs: 16, expert_parallel: true}"))
    assert resolve_builtin_engine(settings.MOONCAKE).config.server().expert_parallel is True
    report = config_report()
    (line,) = [line for line in report.lines if line.split()[:1] == ["expert_parallel"]]
    assert line.split()[1:] == ["True", "yaml", "(engine.expert_parallel)"]
    assert not report.problems
    # TGI has no expert parallelism: check names the setting before any start.
    _use(
        settings,
        tmp_path,
        GUIDE.replace("type: vllm", "type: tgi").replace("16}", "16, expert_parallel: true}"),
    )
    problems = config_report().problems
    assert any(
        "expert_parallel applies to engine types vllm, sglang only (type is 'tgi')" in p for p in problems
    ), problems


def test_each_type_says_how_to_install_it(empty_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else real_find_spec(name, *a)
    )
    assert "text-generation-launcher command is not installed" in str(
        not_installed_problem(EngineConfig(engine_type="tgi"))
    )
    assert "pip install 'sglang[all]'" in str(not_installed_problem(EngineConfig(engine_type="sglang")))
    assert "is not an executable file" in str(
        not_installed_problem(EngineConfig(engine_type="sglang", executable=str(empty_path / "python")))
    )
    assert not_installed_problem(EngineConfig()) is None


def test_start_fails_with_the_install_hint(settings: Any, empty_path: Path) -> None:
    with pytest.raises(EngineNotInstalledError, match=r"pip install vllm; it needs a CUDA GPU"):
        start_engine(EngineConfig(engine_type="vllm"))


def test_the_composition_root_starts_the_supervised_engine(
    settings: Any, tmp_path: Path, empty_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from inference.frontends.supervised.engine import SupervisedEngine

    stand_in = install(tmp_path, "my-vllm", tmp_path / "argv.jsonl")
    started: list[tuple[str, Path]] = []
    monkeypatch.setattr(
        SupervisedEngine,
        "start",
        classmethod(lambda cls, config, *, executable, log_dir: started.append((executable, log_dir))),
    )
    settings.DATA_DIR = tmp_path / "data"
    start_engine(EngineConfig(engine_type="vllm", executable=str(stand_in)))
    assert started == [(str(stand_in), tmp_path / "data" / "engines")]
