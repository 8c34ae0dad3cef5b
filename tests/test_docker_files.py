"""docker/: the image's entry point migrates before it serves (skipped where compose migrates once), its
health check waits out a first model download, and a plain-HTTP trial of the compose file works with the
one variable docs/getting-started/docker.md names. No Docker here: the entry point script runs directly,
the files are parsed."""

from __future__ import annotations

import json
import os
import re
import secrets
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCKER = REPO_ROOT / "docker"
ENTRYPOINT = DOCKER / "entrypoint.sh"


def _env(data: Path, **extra: str) -> dict[str, str]:
    """Production settings on a fresh SQLite in `data`, as `docker run` with only the required variables."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    # The image's `python` is the one with the project installed: this interpreter here.
    path = f"{Path(sys.executable).parent}{os.pathsep}{inherited.get('PATH', '')}"
    return {
        **inherited,
        "PATH": path,
        "DJANGO_SETTINGS_MODULE": "webapp.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "localhost",
        "MOONCAKE_DATA": str(data),
        "MOONCAKE_METRICS_TOKEN": "t",
        **extra,
    }


def _entrypoint(data: Path, command: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(ENTRYPOINT), *command], env=_env(data, **extra), cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _tables(database: Path) -> set[str]:
    with sqlite3.connect(database) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A fresh data folder after the entry point ran once with a trivial command."""
    data = tmp_path_factory.mktemp("data")
    return data, _entrypoint(data, ["python", "-c", "import sys; print('command ran', sys.argv[1:])", "x"])


def test_the_entrypoint_migrates_then_runs_the_command(
    migrated: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    data, result = migrated
    assert result.returncode == 0, result.stdout + result.stderr
    # Migrations first, then the command, with its arguments as given.
    assert "Applying" in result.stdout
    assert result.stdout.rstrip().endswith("command ran ['x']")
    tables = _tables(data / "mooncake.sqlite3")
    assert {"django_migrations", "auth_user", "console_modelregistration"} <= tables


def test_the_entrypoint_exits_with_the_commands_status_and_stops_on_a_failed_migration(
    tmp_path: Path,
) -> None:
    skipped = _entrypoint(tmp_path / "a", ["python", "-c", "raise SystemExit(3)"], MOONCAKE_MIGRATE="0")
    assert skipped.returncode == 3  # exec: the command's own status, as the container's
    assert "Applying" not in skipped.stdout
    assert not (tmp_path / "a" / "mooncake.sqlite3").exists()
    # A migration that cannot run (no SECRET_KEY) never reaches the command.
    broken = _entrypoint(tmp_path / "b", ["python", "-c", "print('served')"], SECRET_KEY="")
    assert broken.returncode != 0 and "served" not in broken.stdout


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n\s*", " ", dockerfile)
    lines = [
        line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_image_migrates_through_its_entrypoint_and_keeps_its_command() -> None:
    steps = _instructions((DOCKER / "Dockerfile").read_text(encoding="utf-8"))
    [entrypoint] = [json.loads(arg) for op, arg in steps if op == "ENTRYPOINT"]
    [cmd] = [json.loads(arg) for op, arg in steps if op == "CMD"]
    assert cmd == ["python", "-m", "webapp.serving.server", "--host", "0.0.0.0", "--port", "8000"]
    # The script is copied to where the exec-form ENTRYPOINT runs it, and made executable.
    [target] = [
        arg.split()[-1] for op, arg in steps if op == "COPY" and arg.split()[0] == "docker/entrypoint.sh"
    ]
    assert entrypoint == [target]
    assert any(op == "RUN" and "chmod" in arg and target in arg for op, arg in steps)
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text(encoding="utf-8").startswith("#!/bin/sh\n")


def test_the_health_check_allows_for_a_first_model_download() -> None:
    steps = _instructions((DOCKER / "Dockerfile").read_text(encoding="utf-8"))
    [check] = [arg for op, arg in steps if op == "HEALTHCHECK"]
    start = re.search(r"--start-period=(\d+)s", check)
    assert start is not None and int(start.group(1)) >= 600


def _services(*files: str) -> dict[str, dict[str, Any]]:
    """The services of compose files merged as `docker compose -f a -f b` merges maps (one level deep)."""
    merged: dict[str, dict[str, Any]] = {}
    for name in files:
        for service, spec in yaml.safe_load((DOCKER / name).read_text(encoding="utf-8"))["services"].items():
            into = merged.setdefault(service, {})
            for key, value in spec.items():
                into[key] = {**into.get(key, {}), **value} if isinstance(value, dict) else value
    return merged


@pytest.mark.parametrize(
    "files", [("compose.yaml",), ("compose.yaml", "compose.external-engine.yaml")], ids=["cpu", "external"]
)
def test_compose_migrates_once_before_the_replicas_start(files: tuple[str, ...]) -> None:
    """Replicas starting together would migrate the shared database at once: only `migrate` does."""
    services = _services(*files)
    image = {name: spec for name, spec in services.items() if "build" in spec}
    assert {"migrate", "web", "worker", "static"} <= set(image)
    for name, spec in image.items():
        assert spec["environment"]["MOONCAKE_MIGRATE"] == "0", name
    assert services["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for name in ("web", "worker"):
        assert services[name]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}


def _production_settings(data: Path, **extra: str) -> dict[str, Any]:
    script = (
        "import json, django; django.setup(); from django.conf import settings as s; print(json.dumps({n: "
        "getattr(s, n) for n in ('SECURE_SSL_REDIRECT', 'SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE')}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=_env(data, **extra), cwd=REPO_ROOT,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout.splitlines()[-1]))


def test_one_variable_makes_a_plain_http_trial(tmp_path: Path) -> None:
    """SECURE_SSL_REDIRECT=0 (what the Docker page and compose.yaml say to set without TLS) also drops the
    cookies' Secure flag: a browser does not keep a Secure cookie from plain HTTP (but on localhost), so
    the login form's CSRF check would fail. TLS stays the default, and each cookie can still be forced."""
    keys = ("SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE")
    assert _production_settings(tmp_path) == dict.fromkeys(keys, True)
    assert _production_settings(tmp_path, SECURE_SSL_REDIRECT="0") == dict.fromkeys(keys, False)
    forced = _production_settings(tmp_path, SECURE_SSL_REDIRECT="0", SESSION_COOKIE_SECURE="1")
    assert forced == {
        "SECURE_SSL_REDIRECT": False,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": False,
    }
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text(encoding="utf-8"))
    assert compose["x-app"]["environment"]["SECURE_SSL_REDIRECT"] == "${SECURE_SSL_REDIRECT:-1}"
    docker_page = (REPO_ROOT / "docs" / "getting-started" / "docker.md").read_text(encoding="utf-8")
    assert re.search(r"\nSECURE_SSL_REDIRECT=0 .*docker compose -f docker/compose.yaml up", docker_page)


def test_a_plain_http_trial_serves_the_login_without_secure_cookies(
    migrated: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """Through nginx's plain-HTTP X-Forwarded-Proto, as the compose trial runs: the first page answers
    (no redirect to an https nobody serves) and its CSRF cookie is one a browser keeps."""
    data, _ = migrated
    script = (
        "import sys, django; django.setup(); from django.test import Client; "
        "r = Client().get('/setup/', HTTP_HOST='localhost', HTTP_X_FORWARDED_PROTO=sys.argv[1]); "
        "c = r.cookies.get('csrftoken'); "
        "print(r.status_code, 'no cookie' if c is None else bool(c['secure']))"
    )

    def first_page(proto: str, **extra: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", script, proto], env=_env(data, **extra), cwd=REPO_ROOT,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[-1]

    assert first_page("http", SECURE_SSL_REDIRECT="0") == "200 False"
    # By default TLS is expected: plain HTTP is sent to https, where the cookie is Secure.
    assert first_page("http") == "301 no cookie"
    assert first_page("https") == "200 True"
