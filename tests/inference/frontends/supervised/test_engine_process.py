"""Engine types vllm, sglang, tgi: the exact command line per type, and the supervised child's life with a
stand-in server (tests/fake_engine_server.py): health wait, start errors, death and restart, shutdown."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from inference import EngineConfig, SamplingParams
from inference.frontends.supervised.engine import SupervisedEngine
from inference.frontends.supervised.process import EngineServerError, server_command
from inference.manager.model_manager import ModelManager
from tests.fake_engine_server import install

MODEL = "Qwen/Qwen2.5-7B-Instruct"
GUIDE = {
    "type": "vllm",
    "tensor_parallel_size": 1,
    "max_num_seqs": 16,
    "model_id": MODEL,
    "dtype": "bfloat16",
    "max_model_len": 8192,
    "gpu_memory_utilization": 0.9,
}


def test_vllm_command_line() -> None:
    config = EngineConfig.from_dict({**GUIDE, "tensor_parallel_size": 4, "pipeline_parallel_size": 2})
    assert server_command(config, executable="/opt/bin/vllm", port=8123) == [
        "/opt/bin/vllm", "serve", MODEL,
        "--host", "127.0.0.1", "--port", "8123", "--served-model-name", MODEL,
        "--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "16",
        "--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--dtype", "bfloat16",
    ]  # fmt: skip


def test_only_settings_that_are_set_are_passed() -> None:
    config = EngineConfig.from_dict({"type": "vllm", "model_id": MODEL, "upstream_model": "qwen"})
    assert server_command(config, executable="vllm", port=1) == [
        "vllm", "serve", MODEL, "--host", "127.0.0.1", "--port", "1", "--served-model-name", "qwen",
        "--gpu-memory-utilization", "0.9", "--max-num-seqs", "64", "--tensor-parallel-size", "1",
    ]  # fmt: skip


def test_sglang_command_line() -> None:
    config = EngineConfig.from_dict({**GUIDE, "type": "sglang", "tensor_parallel_size": 2})
    assert server_command(config, executable="/usr/bin/python3", port=30000) == [
        "/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", MODEL,
        "--host", "127.0.0.1", "--port", "30000", "--tp-size", "2", "--context-length", "8192",
        "--mem-fraction-static", "0.9", "--max-running-requests", "16", "--dtype", "bfloat16",
        "--served-model-name", MODEL,
    ]  # fmt: skip


def test_expert_parallel_is_each_engines_own_flag() -> None:
    vllm = EngineConfig.from_dict({**GUIDE, "tensor_parallel_size": 4, "expert_parallel": True})
    assert server_command(vllm, executable="vllm", port=1) == [
        "vllm", "serve", MODEL,
        "--host", "127.0.0.1", "--port", "1", "--served-model-name", MODEL,
        "--max-model-len", "8192", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "16",
        "--tensor-parallel-size", "4", "--enable-expert-parallel", "--dtype", "bfloat16",
    ]  # fmt: skip
    moe = {"tensor_parallel_size": 2, "expert_parallel": 1}  # a number from yaml reads as a bool
    sglang = EngineConfig.from_dict({**GUIDE, "type": "sglang", **moe})
    argv = server_command(sglang, executable="python3", port=1)
    assert argv[argv.index("--tp-size") :][:4] == ["--tp-size", "2", "--ep-size", "2"]
    # Off (the default), neither engine gets a flag.
    for kind in ("vllm", "sglang"):
        argv = server_command(EngineConfig.from_dict({**GUIDE, "type": kind}), executable="x", port=1)
        assert not {"--enable-expert-parallel", "--ep-size"} & set(argv)


def test_tgi_command_line() -> None:
    config = EngineConfig.from_dict({**GUIDE, "type": "tgi", "tensor_parallel_size": 2})
    assert server_command(config, executable="text-generation-launcher", port=8080) == [
        "text-generation-launcher", "--model-id", MODEL,
        "--hostname", "127.0.0.1", "--port", "8080", "--num-shard", "2", "--max-total-tokens", "8192",
        "--cuda-memory-fraction", "0.9", "--max-concurrent-requests", "16", "--dtype", "bfloat16",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"tensor_parallel_size": 2}, "tensor_parallel_size only apply to engine types vllm, sglang, tgi"),
        ({"type": "openai", "base_url": "http://h/v1", "executable": "x"}, "executable only apply"),
        ({"type": "vllm", "base_url": "http://h/v1"}, "base_url does not apply to engine type 'vllm'"),
        ({"type": "sglang", "api_key": "sk"}, "api_key does not apply"),
        ({"type": "vllm", "tensor_parallel_size": 0}, "tensor_parallel_size must be > 0"),
        ({"type": "tgi", "dtype": "float32"}, "'tgi' runs dtype float16 or bfloat16"),
        ({"type": "tgi", "pipeline_parallel_size": 2}, "no pipeline parallelism"),
        ({"type": "vllm", "startup_timeout": 0}, "startup_timeout must be > 0"),
        (
            {"type": "tgi", "expert_parallel": True},
            r"expert_parallel applies to engine types vllm, sglang only \(type is 'tgi'\)",
        ),
        ({"expert_parallel": True}, r"expert_parallel applies to .* \(type is 'native'\)"),
        ({"type": "transformers", "expert_parallel": "on"}, r"\(type is 'transformers'\)"),
        ({"type": "vllm", "expert_parallel": "sometimes"}, "expert_parallel: cannot use 'sometimes' as bool"),
    ],
)
def test_server_settings_are_checked(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EngineConfig.from_dict(settings)


# ---- the supervised child, with the stand-in server ----------------------------------------------------


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(condition: Any, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def stand_in(tmp_path: Path) -> tuple[Path, Path]:
    record = tmp_path / "argv.jsonl"
    return install(tmp_path, "vllm", record), record


def _config(**settings: Any) -> EngineConfig:
    # The bundled model's tokenizer templates locally; the stand-in serves whatever model it is told.
    return EngineConfig.from_dict({"type": "vllm", "model_id": "default", "startup_timeout": 20, **settings})


def _start(executable: Path, tmp_path: Path, **settings: Any) -> SupervisedEngine:
    return SupervisedEngine.start(_config(**settings), executable=str(executable), log_dir=tmp_path / "logs")


def test_starts_waits_for_health_serves_and_stops(stand_in: tuple[Path, Path], tmp_path: Path) -> None:
    executable, record = stand_in
    engine = _start(executable, tmp_path, max_model_len=1024)
    try:
        (started,) = _records(record)
        assert started["argv"][:2] == ["serve", "default"] and "--max-model-len" in started["argv"]
        assert engine.health().state == "ready"  # start() returned only once /health said 200
        assert engine.health_monitor.known_name == "default"  # --served-model-name

        async def complete() -> str:
            outputs = [o async for o in engine.generate("Hello", SamplingParams(max_tokens=2))]
            return outputs[-1].outputs[0].text

        assert asyncio.run(complete()) == "Hi there"
    finally:
        engine.shutdown()
    assert not _alive(started["pid"])
    assert "stand-in engine server for default" in (tmp_path / "logs" / "vllm-default.log").read_text()


def test_the_stand_in_server_receives_the_expert_parallel_flag(
    stand_in: tuple[Path, Path], tmp_path: Path
) -> None:
    from inference.frontends.supervised.process import EngineProcess, free_port

    executable, record = stand_in
    # As mooncake.yaml or the environment give it: a string.
    config = EngineConfig.from_dict(
        {"type": "vllm", "model_id": "moe", "tensor_parallel_size": "2", "expert_parallel": "true"}
    )
    port = free_port()
    process = EngineProcess(
        server_command(config, executable=str(executable), port=port),
        health_url=f"http://127.0.0.1:{port}/health",
        log_path=tmp_path / "server.log",
        startup_timeout=20,
    )
    process.start()
    try:
        (started,) = _records(record)
        argv = started["argv"]
        assert argv[:2] == ["serve", "moe"] and "--enable-expert-parallel" in argv
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    finally:
        process.stop()
    assert not _alive(started["pid"])


def test_a_child_that_exits_while_starting_is_an_error_with_its_log(
    stand_in: tuple[Path, Path], tmp_path: Path
) -> None:
    executable, record = stand_in
    config = EngineConfig(engine_type="vllm", model="crash", startup_timeout=20)
    with pytest.raises(
        EngineServerError, match=r"exited with code 2 while starting(.|\n)*CUDA out of memory"
    ):
        _start_raw(config, executable, tmp_path)
    assert len(_records(record)) == 1


def _start_raw(config: EngineConfig, executable: Path, tmp_path: Path) -> None:
    """The process alone: the stand-in's model names ("crash", "hang") have no tokenizer."""
    from inference.frontends.supervised.process import EngineProcess, free_port

    port = free_port()
    EngineProcess(
        server_command(config, executable=str(executable), port=port),
        health_url=f"http://127.0.0.1:{port}/health",
        log_path=tmp_path / "server.log",
        startup_timeout=config.startup_timeout,
    ).start()


def test_a_child_that_never_answers_is_stopped_after_the_timeout(
    stand_in: tuple[Path, Path], tmp_path: Path
) -> None:
    executable, record = stand_in
    with pytest.raises(EngineServerError, match=r"did not answer .*/health within 1 s"):
        _start_raw(EngineConfig(engine_type="vllm", model="hang", startup_timeout=1), executable, tmp_path)
    _wait(lambda: not _alive(_records(record)[0]["pid"]))


def test_a_dead_child_is_restarted_by_the_manager_and_unload_stops_it(
    stand_in: tuple[Path, Path], tmp_path: Path
) -> None:
    executable, record = stand_in

    def factory(config: EngineConfig) -> Any:
        return SupervisedEngine.start(config, executable=str(executable), log_dir=tmp_path / "logs")

    manager = ModelManager(engine_factory=factory, restart_backoff_s=0.05)
    manager.register("qwen", _config())
    first = manager.load("qwen")
    (started,) = _records(record)
    port = started["argv"][started["argv"].index("--port") + 1]
    httpx.post(f"http://127.0.0.1:{port}/die", timeout=5)
    _wait(lambda: not _alive(started["pid"]))
    # The supervisor reaps the child, then records why it died: wait for the second step too.
    _wait(lambda: first.health().state != "ready")
    assert first.health().state == "dead" and "exited with code 3" in str(first.health().error)
    _wait(lambda: len(_records(record)) == 2 and manager.list()[0].state == "loaded")
    restarted = _records(record)[1]
    assert restarted["pid"] != started["pid"] and restarted["argv"][:2] == started["argv"][:2]
    assert manager.peek("qwen").health().state == "ready"
    manager.unload("qwen")
    assert not _alive(restarted["pid"])
    assert not _alive(started["pid"])


def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    from inference.frontends.supervised.process import EngineProcess, free_port

    script = tmp_path / "stubborn"
    port = free_port()
    script.write_text(
        "#!/bin/sh\ntrap '' TERM\n"
        f'exec python3 -c "import signal,http.server as h;signal.signal(signal.SIGTERM, signal.SIG_IGN);'
        f"h.HTTPServer(('127.0.0.1',{port}),type('H',(h.BaseHTTPRequestHandler,),"
        "{'do_GET':lambda s:(s.send_response(200),s.end_headers())})).serve_forever()\"\n"
    )
    script.chmod(0o755)
    process = EngineProcess(
        [str(script)],
        health_url=f"http://127.0.0.1:{port}/health",
        log_path=tmp_path / "l.log",
        startup_timeout=20,
    )
    process.start()
    pid = process.pid
    assert pid is not None
    began = time.monotonic()
    process.stop(grace=0.5)
    assert time.monotonic() - began < 10
    assert not _alive(pid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the whole group is gone, the shell's python child included


def test_extra_args_reach_the_command_line_last_and_only_for_a_server_mooncake_starts() -> None:
    listed = {
        "type": "vllm",
        "model_id": MODEL,
        "extra_args": ["--enable-expert-parallel", "--quantization", "fp8"],
    }
    assert server_command(EngineConfig.from_dict(listed), executable="vllm", port=1)[-3:] == [
        "--enable-expert-parallel", "--quantization", "fp8",
    ]  # fmt: skip
    # From the environment, one shell-quoted string.
    quoted = EngineConfig.from_dict(
        {"type": "sglang", "model_id": MODEL, "extra_args": "--mem-fraction-static '0.8'"}
    )
    assert quoted.server().extra_args == ("--mem-fraction-static", "0.8")
    with pytest.raises(ValueError, match="extra_args only apply to engine types vllm, sglang, tgi"):
        EngineConfig.from_dict({"type": "native", "extra_args": ["--x"]})
    with pytest.raises(ValueError, match="extra_args must be a list of non-empty strings"):
        EngineConfig.from_dict({"type": "tgi", "model_id": MODEL, "extra_args": ["--ok", ""]})
