"""Accounts fixtures: an admin (so first-run setup is done), sign-up settings, a real OIDC provider."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.webapp.accounts.oidc_provider import CLIENT_ID, CLIENT_SECRET, Provider, start_provider
from webapp.accounts.models import SignupSettings
from webapp.accounts.oidc import forget_discovery

ADMIN_PASSWORD = "admin-password-for-tests-1"


@pytest.fixture
def admin(db: None) -> User:
    return User.objects.create_superuser("admin", "admin@example.org", ADMIN_PASSWORD)


@pytest.fixture
def admin_client(admin: User) -> Client:
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def signup_on(admin: User) -> SignupSettings:
    return SignupSettings.objects.create(pk=1, enabled=True)


@pytest.fixture
def provider(settings: Any, admin: User) -> Iterator[Provider]:
    """A running provider, and this server configured for it through discovery (as production would be)."""
    running = start_provider()
    settings.MOONCAKE_OIDC_ISSUER = running.url
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.MOONCAKE_OIDC_GROUPS_CLAIM = "groups"
    running.claims = {
        "sub": "user-1",
        "email": "ada@corp.example",
        "email_verified": True,
        "preferred_username": "ada",
        "groups": ["engineers", "gpu-users"],
    }
    forget_discovery()
    yield running
    running.stop()
    forget_discovery()
