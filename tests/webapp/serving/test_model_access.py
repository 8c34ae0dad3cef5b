"""Model access: a model restricted to groups is used and listed only by their members (and staff);
everyone else gets the 404 of a model that does not exist, through the API, its tokenizer endpoints and
the chat's admission."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import Group, User
from django.test import AsyncClient

from tests.webapp.api.conftest import post_json
from tests.webapp.fake_engine import FakeEngine, FakeModelManager
from webapp.accounts.services import api_key_create
from webapp.core.errors import NotFound
from webapp.core.models import ModelRegistration
from webapp.serving.model_access import (
    ANONYMOUS,
    Viewer,
    ensure_may_use,
    may_use,
    restrictions,
    restrictions_changed,
    viewer_for_user,
)
from webapp.serving.runtime import get_runtime

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_models() -> Any:
    manager = FakeModelManager.with_engine(FakeEngine(model_name="open"), aliases=["default"])
    manager.register("secret", None, aliases=["hush"])
    manager.attach("secret", FakeEngine(model_name="secret", script="Restricted words."))
    get_runtime().install_manager(manager)
    yield manager
    get_runtime().install_manager(None)


@pytest.fixture
def people() -> dict[str, Any]:
    research = Group.objects.create(name="research")
    Group.objects.create(name="sales")
    row = ModelRegistration.objects.create(name="secret", source="default", restricted=True)
    row.allowed_groups.add(research)
    restrictions_changed()
    member = User.objects.create_user("member", password="pw-member-1")
    member.groups.add(research)
    outsider = User.objects.create_user("outsider", password="pw-outsider-1")
    outsider.groups.add(Group.objects.get(name="sales"))
    admin = User.objects.create_user("admin", password="pw-admin-1", is_staff=True)
    return {
        "member": api_key_create(user=member, name="m").secret,
        "outsider": api_key_create(user=outsider, name="o").secret,
        "admin": api_key_create(user=admin, name="a").secret,
    }


def _auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_the_rule_in_both_directions() -> None:
    restricted = {"secret": frozenset({1})}
    assert may_use(Viewer(user_id=5, group_ids=frozenset({1})), "secret", restricted)
    assert not may_use(Viewer(user_id=6, group_ids=frozenset({2})), "secret", restricted)
    assert may_use(Viewer(user_id=7, staff=True), "secret", restricted)
    assert not may_use(ANONYMOUS, "secret", restricted)
    assert may_use(ANONYMOUS, "open", restricted)
    # Restricted with no group left (its last one was deleted): admins only.
    orphan = {"orphan": frozenset[int]()}
    assert not may_use(Viewer(user_id=5, group_ids=frozenset({1})), "orphan", orphan)
    assert may_use(Viewer(user_id=7, staff=True), "orphan", orphan)


def test_aliases_and_the_default_name_are_checked_as_the_model(people: Any, two_models: Any) -> None:
    outsider = viewer_for_user(user_id=User.objects.get(username="outsider").pk)
    for name in ("secret", "hush"):
        with pytest.raises(NotFound, match=f"model '{name}' does not exist"):
            ensure_may_use(outsider, two_models, name)
    two_models.default_name = "secret"
    with pytest.raises(NotFound):
        ensure_may_use(outsider, two_models, None)
    ensure_may_use(viewer_for_user(user_id=User.objects.get(username="member").pk), two_models, "hush")
    ensure_may_use(outsider, two_models, "unknown")  # left to the manager, which says the same


def test_changes_reach_this_process_at_once_when_told(people: Any) -> None:
    assert "secret" in restrictions()
    ModelRegistration.objects.filter(name="secret").update(restricted=False)
    restrictions_changed()
    assert "secret" not in restrictions()


@pytest.mark.database
@pytest.mark.parametrize(("who", "allowed"), [("member", True), ("admin", True), ("outsider", False)])
async def test_api_chat_completions(
    people: Any, two_models: Any, settings: Any, who: str, allowed: bool
) -> None:
    settings.MOONCAKE_API_AUTH = "required"
    client = AsyncClient()
    body = {"model": "secret", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = await post_json(client, "/v1/chat/completions", body, **_auth(people[who]))
    if allowed:
        assert response.status_code == 200, response.content
    else:
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "model_not_found" and error["type"] == "not_found_error"
    # The open model is everyone's.
    body["model"] = "open"
    assert (await post_json(client, "/v1/chat/completions", body, **_auth(people[who]))).status_code == 200


@pytest.mark.database
@pytest.mark.parametrize(("who", "allowed"), [("member", True), ("outsider", False)])
async def test_models_list_retrieve_and_tokenize(
    people: Any, two_models: Any, settings: Any, who: str, allowed: bool
) -> None:
    settings.MOONCAKE_API_AUTH = "required"
    client = AsyncClient()
    headers = _auth(people[who])
    listed = {m["id"] for m in (await client.get("/v1/models", headers=headers)).json()["data"]}
    assert ("secret" in listed) is allowed and "open" in listed
    assert (await client.get("/v1/models/secret", headers=headers)).status_code == (200 if allowed else 404)
    response = await post_json(client, "/tokenize", {"model": "hush", "prompt": "a b"}, **headers)
    assert response.status_code == (200 if allowed else 404)


@pytest.mark.database
async def test_anonymous_callers_see_public_models_only(people: Any, two_models: Any, settings: Any) -> None:
    settings.MOONCAKE_API_AUTH = "off"
    client = AsyncClient()
    listed = {m["id"] for m in (await client.get("/v1/models")).json()["data"]}
    assert listed == {"open"}
    body = {"model": "secret", "prompt": "x", "max_tokens": 2}
    assert (await post_json(client, "/v1/completions", body)).status_code == 404


@pytest.mark.database
async def test_chat_admission_refuses_a_model_the_user_may_not_use(people: Any, two_models: Any) -> None:
    from webapp.chat.admission import admit_send
    from webapp.chat.models import Conversation

    outsider = await sync_to_async(User.objects.get)(username="outsider")
    member = await sync_to_async(User.objects.get)(username="member")
    messages = [{"role": "user", "content": "hi"}]
    refused = await sync_to_async(Conversation.objects.create)(user=outsider, model="secret")
    with pytest.raises(NotFound):
        await admit_send(refused, 60, messages)
    allowed = await sync_to_async(Conversation.objects.create)(user=member, model="secret")
    run = await admit_send(allowed, 60, messages)
    await run.close()


@pytest.mark.database
def test_the_chat_picker_and_settings_offer_only_usable_models(people: Any, two_models: Any) -> None:
    from django.test import Client

    from webapp.chat.models import Conversation

    for username, sees in (("outsider", False), ("member", True)):
        user = User.objects.get(username=username)
        chat = Conversation.objects.create(user=user)
        client = Client()
        client.force_login(user)
        page = client.get(f"/chat/{chat.pk}/").content.decode()
        assert ('value="secret"' in page) is sees, username
        assert 'value="open"' in page
        response = client.post(f"/chat/{chat.pk}/model/", {"model": "secret"})
        assert response.status_code == (200 if sees else 400)
        chat.refresh_from_db()
        assert (chat.model == "secret") is sees
