"""pytest: a throwaway data directory, a shared model cache, no model autoload, fast hashing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# Before base reads them. The environment carries both to the servers and workers tests start, and the
# converted-model cache outlives the run so the default GGUF is converted once per checkout.
if not os.environ.get("MOONCAKE_DATA"):
    os.environ["MOONCAKE_DATA"] = tempfile.mkdtemp(prefix="mooncake-test-")
    os.environ["MOONCAKE_TEST_OWNS_DATA"] = os.environ["MOONCAKE_DATA"]
os.environ.setdefault("MOONCAKE_CACHE_DIR", str(Path(__file__).resolve().parents[2] / "var" / "cache"))

from webapp.core.config import resolve_settings
from webapp.settings.base import *  # noqa: F403

# A developer's own ./mooncake.yaml must not change what the tests see; MOONCAKE_CONFIG still can.
MOONCAKE_SETTINGS = resolve_settings(defaults={"autoload": False}, discover=False)
MOONCAKE_CONFIG_PATH = MOONCAKE_SETTINGS.server.config_file
MOONCAKE = MOONCAKE_SETTINGS.yaml
MOONCAKE_AUTOLOAD = MOONCAKE_SETTINGS.server.autoload

DEBUG = False
SECRET_KEY = "mooncake-test-secret-key-not-for-production-use-0123456789abcdef"
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# The run's own process keeps the in-memory layer whatever REDIS_URL says (Redis tests switch per test);
# servers it starts as replicas of one deployment set MOONCAKE_TEST_SHARED_LAYER=1 and share Redis's.
if os.environ.get("MOONCAKE_TEST_SHARED_LAYER") != "1":
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
