"""Settings, API keys: people make and revoke their own keys when an admin allows it (site-wide or per
group). The secret is shown once and stored hashed; another's key is a 404; a refusal is a 403 with the
reason inline, never a 500; the page says when the API takes no keys at all."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from webapp.accounts import own_keys
from webapp.accounts.keys import hash_secret
from webapp.accounts.models import ApiKey, GroupPolicy
from webapp.accounts.selectors import api_key_get_active
from webapp.accounts.services import api_key_create
from webapp.core.errors import InvalidRequest, NotFound, PermissionDenied
from webapp.core.site import site_settings, site_settings_update

pytestmark = [pytest.mark.django_db, pytest.mark.database]
PAGE, CREATE = "/settings/", "/settings/keys/"


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="pw-alice-42")


@pytest.fixture
def allowed() -> None:
    site_settings_update(default_system_prompt="", banner_text="", banner_level="info", user_api_keys=True)


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


# ---- the services ---------------------------------------------------------------------------------------


def test_create_returns_the_secret_once_and_stores_its_hash(alice: User, allowed: None) -> None:
    created = own_keys.own_key_create(user=alice, name="  laptop ")
    key = ApiKey.objects.get(user=alice)
    assert key.name == "laptop" and key.prefix == created.secret[:11]
    assert key.secret_hash == hash_secret(created.secret)
    assert not any(created.secret in str(getattr(key, f.attname)) for f in ApiKey._meta.concrete_fields)
    assert api_key_get_active(secret=created.secret) == key


def test_refused_unless_the_site_or_a_group_allows_it(alice: User) -> None:
    with pytest.raises(PermissionDenied) as refused:
        own_keys.own_key_create(user=alice, name="x")
    assert refused.value.status == 403 and "issued by an admin" in refused.value.message
    assert not ApiKey.objects.exists()
    group = Group.objects.create(name="devs")
    group.user_set.add(alice)
    GroupPolicy.objects.create(group=group, api_keys_allowed=True)
    assert own_keys.own_keys_allowed(user=alice)
    own_keys.own_key_create(user=alice, name="x")
    # Admins may always: they can issue keys in the console anyway.
    assert own_keys.own_keys_allowed(user=User.objects.create_user("root", is_staff=True))


def test_revoke_only_ones_own(alice: User, allowed: None) -> None:
    bob = User.objects.create_user("bob")
    bobs = api_key_create(user=bob, name="bob's")
    with pytest.raises(NotFound):
        own_keys.own_key_revoke(user=alice, key_id=bobs.api_key.pk)
    assert ApiKey.objects.get(pk=bobs.api_key.pk).is_active
    mine = own_keys.own_key_create(user=alice, name="mine")
    own_keys.own_key_revoke(user=alice, key_id=mine.api_key.pk)
    assert api_key_get_active(secret=mine.secret) is None
    with pytest.raises(NotFound):  # once revoked, it is gone from its owner's view too
        own_keys.own_key_revoke(user=alice, key_id=mine.api_key.pk)


def test_names_and_counts_are_bounded(alice: User, allowed: None, monkeypatch: Any) -> None:
    with pytest.raises(InvalidRequest):
        own_keys.own_key_create(user=alice, name="n" * 101)
    monkeypatch.setattr(own_keys, "MAX_ACTIVE_OWN_KEYS", 2)
    own_keys.own_key_create(user=alice, name="a")
    own_keys.own_key_create(user=alice, name="b")
    with pytest.raises(InvalidRequest) as too_many:
        own_keys.own_key_create(user=alice, name="c")
    assert too_many.value.code == "too_many_keys"


# ---- the page -------------------------------------------------------------------------------------------


def test_page_lists_own_keys_only(alice: User, allowed: None) -> None:
    mine = api_key_create(user=alice, name="laptop")
    theirs = api_key_create(user=User.objects.create_user("bob"), name="bobs-key")
    page = signed_in(alice).get(PAGE)
    body = page.content.decode()
    assert page.status_code == 200 and 'id="api-keys"' in body and 'id="key-create-form"' in body
    assert "laptop" in body and mine.api_key.prefix in body
    assert "bobs-key" not in body and theirs.api_key.prefix not in body
    assert mine.secret not in body


def test_create_shows_the_secret_once(alice: User, allowed: None) -> None:
    client = signed_in(alice)
    response = client.post(CREATE, {"name": "ci"})
    assert response.status_code == 200
    key = ApiKey.objects.get(user=alice, name="ci")
    body = response.content.decode()
    secret = body.split('<pre id="new-key-secret">')[1].split("</pre>")[0]
    assert hash_secret(secret) == key.secret_hash
    assert 'data-copy-secret="new-key-secret"' in body and "preferences/keys.js" in body
    assert "no-store" in response["Cache-Control"]
    assert secret not in client.get(PAGE).content.decode()  # not shown again


def test_revoke_and_404_for_anothers_key(alice: User, allowed: None) -> None:
    client = signed_in(alice)
    mine = api_key_create(user=alice, name="mine")
    theirs = api_key_create(user=User.objects.create_user("bob"), name="theirs")
    assert client.post(f"/settings/keys/{theirs.api_key.pk}/revoke/").status_code == 404
    assert client.post("/settings/keys/999999/revoke/").status_code == 404
    assert ApiKey.objects.get(pk=theirs.api_key.pk).is_active
    response = client.post(f"/settings/keys/{mine.api_key.pk}/revoke/")
    assert response.status_code == 302 and response["Location"].endswith("#api-keys")
    assert not ApiKey.objects.get(pk=mine.api_key.pk).is_active
    assert client.get(f"/settings/keys/{mine.api_key.pk}/revoke/").status_code == 405


def test_refused_when_not_allowed(alice: User) -> None:
    client = signed_in(alice)
    page = client.get(PAGE).content.decode()
    assert 'id="keys-by-admin"' in page and 'id="key-create-form"' not in page
    response = client.post(CREATE, {"name": "sneaky"})
    assert response.status_code == 403
    assert 'id="key-error"' in response.content.decode() and not ApiKey.objects.exists()
    # Revoking one an admin issued still works: a user may always give up a credential.
    issued = api_key_create(user=alice, name="issued")
    assert client.post(f"/settings/keys/{issued.api_key.pk}/revoke/").status_code == 302


def test_page_says_when_the_api_takes_no_keys(alice: User, settings: Any) -> None:
    settings.MOONCAKE_API_AUTH = "required"
    assert 'id="api-auth-off"' not in signed_in(alice).get(PAGE).content.decode()
    settings.MOONCAKE_API_AUTH = "off"
    assert "MOONCAKE_API_AUTH=off" in signed_in(alice).get(PAGE).content.decode()


def test_anonymous_is_sent_to_log_in() -> None:
    User.objects.create_superuser("root", password="pw-root-42")  # first-run setup done
    response = Client().post(CREATE, {"name": "x"})
    assert response.status_code == 302 and "login" in response["Location"]


def test_admin_toggles_the_switches_in_the_console(alice: User) -> None:
    admin = User.objects.create_user("root", password="pw", is_staff=True, is_superuser=True)
    client = signed_in(admin)
    form = {"default_system_prompt": "", "banner_text": "", "banner_level": "info", "user_api_keys": "on"}
    assert client.post("/console/site/", form).status_code == 302
    assert site_settings().user_api_keys and own_keys.own_keys_allowed(user=alice)
    del form["user_api_keys"]
    client.post("/console/site/", form)
    assert not site_settings().user_api_keys and not own_keys.own_keys_allowed(user=alice)
    group = Group.objects.create(name="devs")
    group.user_set.add(alice)
    response = client.post(f"/console/groups/{group.pk}/policy/", {"api_keys_allowed": "on"})
    assert response.status_code == 302
    assert GroupPolicy.objects.get(group=group).api_keys_allowed and own_keys.own_keys_allowed(user=alice)
