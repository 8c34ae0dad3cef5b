"""pytest: a throwaway data directory (set by tests/conftest.py), no model autoload, fast hashing."""

from __future__ import annotations

from webapp.settings.base import *  # noqa: F403
from webapp.settings.env import env_bool, env_choice

DEBUG = False
SECRET_KEY = "mooncake-test-secret-key-not-for-production-use-0123456789abcdef"
ALLOWED_HOSTS = ["testserver", "127.0.0.1", "localhost"]
MOONCAKE_AUTOLOAD = env_bool("MOONCAKE_AUTOLOAD", False)
MOONCAKE_API_AUTH = env_choice("MOONCAKE_API_AUTH", "required", ("required", "off"))
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
