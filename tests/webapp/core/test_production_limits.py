"""Production settings ship fallback API limits; local use stays unlimited; `check --deploy` stays clean."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from webapp.core.config import PRODUCTION_DEFAULTS, api_limits, resolve_settings

REPO_ROOT = Path(__file__).resolve().parents[3]
PRINT_LIMITS = (
    "import json, django; django.setup(); from django.conf import settings; "
    "print(json.dumps(settings.MOONCAKE_API_LIMITS))"
)


def _limits(module: str, tmp_path: Path, **extra: str) -> dict[str, int | None]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("MOONCAKE_", "DJANGO_"))}
    env = {
        **inherited,
        "DJANGO_SETTINGS_MODULE": module,
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "mooncake.example.com",
        "MOONCAKE_DATA": str(tmp_path),
        **extra,
    }
    result = subprocess.run(
        [sys.executable, "-c", PRINT_LIMITS],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    limits: dict[str, int | None] = json.loads(result.stdout.strip().splitlines()[-1])
    return limits


def test_production_settings_resolve_to_non_null_limits(tmp_path: Path) -> None:
    limits = _limits("webapp.settings.production", tmp_path)
    assert limits == {"requests_per_minute": 60, "tokens_per_minute": 100_000, "max_concurrent_requests": 4}


def test_production_limits_follow_the_variables_and_zero_is_unlimited(tmp_path: Path) -> None:
    limits = _limits(
        "webapp.settings.production",
        tmp_path,
        MOONCAKE_API_REQUESTS_PER_MINUTE="600",
        MOONCAKE_API_MAX_CONCURRENT="0",
    )
    assert limits == {
        "requests_per_minute": 600,
        "tokens_per_minute": 100_000,
        "max_concurrent_requests": None,
    }


def test_local_settings_stay_unlimited(tmp_path: Path) -> None:
    limits = _limits("webapp.settings.local", tmp_path)
    assert limits == {"requests_per_minute": None, "tokens_per_minute": None, "max_concurrent_requests": None}


def test_production_defaults_are_reported_as_defaults() -> None:
    resolved = resolve_settings({}, defaults=PRODUCTION_DEFAULTS, discover=False)
    assert all(v is not None for v in api_limits(resolved.server).values())
    assert resolved.sources["api_requests_per_minute"].source == "default"
    plain = resolve_settings({}, discover=False)
    assert all(v is None for v in api_limits(plain.server).values())
