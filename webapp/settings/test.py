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

from webapp.settings.base import *  # noqa: F403
from webapp.settings.env import env_bool, env_choice
from webapp.settings.mooncake_yaml import load_mooncake_config

# A developer's own ./mooncake.yaml must not change what the tests see; MOONCAKE_CONFIG still can.
if not os.environ.get("MOONCAKE_CONFIG"):
    MOONCAKE_CONFIG_PATH = None
    MOONCAKE = load_mooncake_config(None)

DEBUG = False
SECRET_KEY = "mooncake-test-secret-key-not-for-production-use-0123456789abcdef"
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
MOONCAKE_AUTOLOAD = env_bool("MOONCAKE_AUTOLOAD", False)
MOONCAKE_API_AUTH = env_choice("MOONCAKE_API_AUTH", "required", ("required", "off"))
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
