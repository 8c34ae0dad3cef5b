"""Key material: generation and hashing (one place, so the format never drifts)."""

from __future__ import annotations

import hashlib
import secrets

KEY_PREFIX = "mc-"
# Characters of the secret shown back to users (includes KEY_PREFIX).
DISPLAY_PREFIX_LEN = 11


def generate_secret() -> str:
    """A new secret; 32 random bytes make brute force pointless, so a fast hash is enough."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def display_prefix(secret: str) -> str:
    return secret[:DISPLAY_PREFIX_LEN]
