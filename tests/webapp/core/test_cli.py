"""The `mooncake` console script: check, models, and serve's start-up and clean stop."""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.live_server import free_port, shared_cache_dir
from webapp.cli import build_parser
from webapp.processes import port_taken

REPO_ROOT = Path(__file__).resolve().parents[3]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    # The run's cache (its kernels built at install): a fresh one would compile them, minutes on 2 cores.
    cache = str(shared_cache_dir())
    return {
        **inherited,
        "MOONCAKE_DATA": str(tmp_path / "data"),
        "MOONCAKE_CACHE_DIR": cache,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def _mooncake(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webapp.cli", *args],
        env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def test_parser_knows_the_three_commands() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--config", "m.yaml", "--port", "9000"]).port == 9000
    assert parser.parse_args(["check"]).command == "check"
    assert parser.parse_args(["models"]).command == "models"
    with pytest.raises(SystemExit):
        parser.parse_args([])


def test_check_reports_settings_and_the_default_model(tmp_path: Path) -> None:
    result = _mooncake(["check"], _env(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SmolLM2-135M-Instruct <- " in result.stdout
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in result.stdout
    # Natively, on the path this machine's CPU takes for a Q4_1 GGUF.
    (runs,) = [line.split(None, 1)[1] for line in result.stdout.splitlines() if line.startswith("  runs ")]
    paths = ("GGUF blocks read as stored", "bf16 dense", "fp32 dense")
    assert runs in [f"native: LlamaForCausalLM, {path}" for path in paths], runs
    assert result.stdout.rstrip().endswith("OK")


def test_check_prints_every_value_and_its_source(tmp_path: Path) -> None:
    config = tmp_path / "mooncake.yaml"
    config.write_text("server: {drain_timeout: 7}\nengine: {max_num_seqs: 8}\n")
    env = _env(
        tmp_path, MOONCAKE_DRAIN_TIMEOUT="12", MOONCAKE_API_REQUEST_TIMEOUT="60", MOONCAKE_CPU_THREADS="2"
    )
    result = _mooncake(["check", "--config", str(config)], env)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line.startswith("  ")}
    assert rows["drain_timeout"] == ["7.0", "yaml", "(server.drain_timeout)"]  # the file over the variable
    assert rows["api_request_timeout"] == ["60.0", "env", "(MOONCAKE_API_REQUEST_TIMEOUT)"]
    assert rows["port"] == ["8000", "default"]
    assert rows["max_num_seqs"] == ["8", "yaml", "(engine.max_num_seqs)"]
    assert rows["cpu_threads"] == ["2", "env", "(MOONCAKE_CPU_THREADS)"]
    assert "engine: SmolLM2-135M-Instruct (mooncake.yaml's model, as the server starts it)" in result.stdout
    assert "console overrides not shown" in result.stdout  # no database yet: `check` does not migrate


def test_check_fails_on_a_missing_model_path(tmp_path: Path) -> None:
    config = tmp_path / "mooncake.yaml"
    config.write_text(f"model: {{model_id: {tmp_path / 'nowhere'}}}\n")
    result = _mooncake(["check", "--config", str(config)], _env(tmp_path))
    assert result.returncode == 1
    assert "does not exist" in result.stderr


def test_check_refuses_a_missing_config_file(tmp_path: Path) -> None:
    result = _mooncake(["check", "--config", str(tmp_path / "absent.yaml")], _env(tmp_path))
    assert result.returncode != 0
    assert "does not exist" in result.stderr


@pytest.mark.parametrize(
    ("yaml", "env", "named"),
    [
        (
            "engine: {type: openai, base_url: 'http://h:1/v1', api_key_env: UPSTREAM_KEY}\n",
            {},
            "UPSTREAM_KEY",
        ),
        ("", {"MOONCAKE_LOGIN_FAILURE_LIMIT": "many"}, "MOONCAKE_LOGIN_FAILURE_LIMIT"),
    ],
)
def test_a_bad_setting_is_one_line_naming_it(
    tmp_path: Path, yaml: str, env: dict[str, str], named: str
) -> None:
    config = tmp_path / "mooncake.yaml"
    config.write_text(yaml or "server: {port: 8000}\n")
    result = _mooncake(["check", "--config", str(config)], _env(tmp_path, **env))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mooncake: configuration error:") and named in lines[0], (
        lines
    )


def test_serve_on_a_port_in_use_says_so_once_and_fails(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _mooncake(
            ["serve", "--port", str(port), "--no-worker"], _env(tmp_path, MOONCAKE_AUTOLOAD="0")
        )
    assert result.returncode == 1
    ours = [line for line in (result.stdout + result.stderr).splitlines() if "mooncake" in line.lower()]
    expected = (
        f"mooncake: cannot listen on 127.0.0.1:{port}: Address already in use (is another server there?)"
    )
    assert ours == [expected]  # once, and no "Mooncake is running" before it


def test_models_without_a_running_server(tmp_path: Path) -> None:
    result = _mooncake(["models", "--port", str(free_port())], _env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "SmolLM2-135M-Instruct  (default)" in result.stdout
    assert "not running" in result.stdout


@pytest.mark.worker
def test_serve_migrates_starts_server_and_worker_and_stops_on_sigterm(tmp_path: Path) -> None:
    port = free_port()
    env = _env(tmp_path, MOONCAKE_AUTOLOAD="0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "webapp.cli", "serve", "--port", str(port)],
        env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        banner = ""
        assert proc.stdout is not None
        deadline = time.monotonic() + 120
        while "Ctrl-C stops everything" not in banner and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            banner += line
        assert f"http://127.0.0.1:{port}/" in banner, banner
        assert "create the administrator account" in banner
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=10) as response:
            assert response.status == 200
        assert (tmp_path / "data" / "mooncake.sqlite3").is_file()
        deadline = time.monotonic() + 60
        while "ready." not in banner and time.monotonic() < deadline:  # Celery's "celery@host ready."
            banner += proc.stdout.readline()
        assert "ready." in banner
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_refuses_a_public_bind_with_debug_or_open_api(tmp_path: Path) -> None:
    result = _mooncake(["serve", "--host", "0.0.0.0", "--no-worker"], _env(tmp_path, MOONCAKE_API_AUTH="off"))
    assert result.returncode != 0
    assert "refusing to listen on 0.0.0.0" in result.stderr and "MOONCAKE_API_AUTH=off" in result.stderr
    assert not (tmp_path / "data" / "mooncake.sqlite3").exists()  # refused before migrating


def _read_until(proc: subprocess.Popen[str], marker: str, timeout: float) -> str:
    assert proc.stdout is not None
    text = ""
    deadline = time.monotonic() + timeout
    while marker not in text and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        text += line
    return text


def test_serve_on_a_public_bind_forces_api_keys_and_no_debug_and_prints_the_setup_link(
    tmp_path: Path,
) -> None:
    port = free_port()
    env = _env(tmp_path, MOONCAKE_AUTOLOAD="0")
    serve = ["serve", "--host", "0.0.0.0", "--port", str(port), "--no-worker"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "webapp.cli", *serve],
        env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        banner = _read_until(proc, "Ctrl-C stops everything", 120)
        assert "DEBUG off, API keys required" in banner, banner
        # Says where a key comes from before the first request is refused, and the 401 says it again.
        assert f"on http://127.0.0.1:{port}/console/users/ (a user's page, Keys)" in banner, banner
        data = tmp_path / "data"
        key = (data / "secret_key").read_text(encoding="utf-8").strip()
        token = hmac.new(key.encode(), b"mooncake first-run setup", hashlib.sha256).hexdigest()[:32]
        assert f"http://127.0.0.1:{port}/setup/?token={token}" in banner, banner
        # Host: localhost is what anyone may send; it must no longer open the API or debug pages
        # (/health... is a path first-run setup does not redirect).
        for path, status in (("/v1/models", 401), ("/health-no-such-page", 404)):
            request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": "localhost"})
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == status
            body = refused.value.read()
            assert b"DEBUG = True" not in body
            assert (b"/console/users/" in body) is (status == 401)
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for name in ("mooncake.sqlite3", "secret_key"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_killed_serve_takes_its_server_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves `serve` no chance to stop its children: the kernel does (PDEATHSIG), and a restart finds
    the port free."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "webapp.cli", "serve", "--port", str(port), "--no-worker"],
        env=_env(tmp_path, MOONCAKE_AUTOLOAD="0"), cwd=REPO_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        _read_until(proc, "Ctrl-C stops everything", 120)
        proc.kill()
        proc.wait(timeout=10)
        deadline = time.monotonic() + 60
        while port_taken("127.0.0.1", port) is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert port_taken("127.0.0.1", port) is None, "the server outlived the killed serve"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
