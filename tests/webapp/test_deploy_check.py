"""Production settings: `manage.py check --deploy` is clean, and missing secrets fail loudly."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def _manage(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    full_env = {**inherited, "DJANGO_SETTINGS_MODULE": "webapp.settings.production", **env}
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args],
        env=full_env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_check_deploy_reports_nothing(tmp_path: Path) -> None:
    env = {
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "mooncake.example.com",
        "MOONCAKE_DATA": str(tmp_path),
    }
    result = _manage(["check", "--deploy", "--fail-level", "DEBUG"], env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_production_requires_secret_key(tmp_path: Path) -> None:
    result = _manage(["check"], {"ALLOWED_HOSTS": "mooncake.example.com", "MOONCAKE_DATA": str(tmp_path)})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "SECRET_KEY is required" in result.stderr


def test_production_requires_allowed_hosts(tmp_path: Path) -> None:
    result = _manage(["check"], {"SECRET_KEY": secrets.token_urlsafe(50), "MOONCAKE_DATA": str(tmp_path)})
    assert result.returncode != 0
    assert "ALLOWED_HOSTS is required" in result.stderr
