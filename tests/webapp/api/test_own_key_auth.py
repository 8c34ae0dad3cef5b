"""A key a user made in Settings works on the API as an admin-issued one does, and stops when revoked."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import AsyncClient, Client

from tests.webapp.api.conftest import post_json
from tests.webapp.api.test_validation import USER
from tests.webapp.fake_engine import FakeModelManager
from webapp.accounts.models import ApiKey
from webapp.core.site import site_settings_update

pytestmark = pytest.mark.django_db(transaction=True)


def _create_in_settings() -> tuple[Client, str, int]:
    site_settings_update(default_system_prompt="", banner_text="", banner_level="info", user_api_keys=True)
    user = User.objects.create_user("alice", password="pw-alice-42")
    client = Client()
    client.force_login(user)
    body = client.post("/settings/keys/", {"name": "script"}).content.decode()
    secret = body.split('<pre id="new-key-secret">')[1].split("</pre>")[0]
    return client, secret, ApiKey.objects.get(user=user).pk


@pytest.mark.database
async def test_self_made_key_authenticates_until_revoked(settings: Any, manager: FakeModelManager) -> None:
    settings.MOONCAKE_API_AUTH = "required"
    client, secret, key_id = await sync_to_async(_create_in_settings)()
    api = AsyncClient()
    headers = {"Authorization": f"Bearer {secret}"}
    response = await post_json(api, "/v1/chat/completions", {"messages": USER, "max_tokens": 2}, **headers)
    assert response.status_code == 200
    assert (await ApiKey.objects.aget(pk=key_id)).last_used_at is not None
    await sync_to_async(client.post)(f"/settings/keys/{key_id}/revoke/")
    response = await post_json(api, "/v1/chat/completions", {"messages": USER, "max_tokens": 2}, **headers)
    assert response.status_code == 401
