"""The prompt library: private vs shared, staff-only sharing, others' ids, limits, and the JSON list."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.core.errors import InvalidRequest, PermissionDenied
from webapp.preferences import selectors, services
from webapp.preferences.models import MAX_BODY_CHARS, MAX_TITLE_CHARS, SavedPrompt

pytestmark = [pytest.mark.database, pytest.mark.django_db]


@pytest.fixture
def alice(client: Client) -> User:
    user = User.objects.create_user("alice", password="pw")
    client.force_login(user)
    return user


@pytest.fixture
def admin() -> User:
    return User.objects.create_user("admin", password="pw", is_staff=True)


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


def library(client: Client) -> list[dict[str, object]]:
    response = client.get("/prompts/library.json")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    prompts: list[dict[str, object]] = response.json()["prompts"]
    return prompts


def test_create_edit_delete_own_prompt(client: Client, alice: User) -> None:
    response = client.post("/prompts/", {"title": "  Summarise  ", "body": "Summarise this:\n"})
    assert response.status_code == 302
    prompt = SavedPrompt.objects.get(owner=alice)
    assert (prompt.title, prompt.body, prompt.shared) == ("Summarise", "Summarise this:", False)
    assert "Summarise this:" in client.get("/settings/").content.decode()

    page = client.get(f"/prompts/{prompt.pk}/edit/")
    assert page.status_code == 200 and "Summarise this:</textarea>" in page.content.decode()
    assert (
        client.post(f"/prompts/{prompt.pk}/edit/", {"title": "Sum", "body": "Short summary:"}).status_code
        == 302
    )
    prompt.refresh_from_db()
    assert (prompt.title, prompt.body) == ("Sum", "Short summary:")

    assert client.post(f"/prompts/{prompt.pk}/delete/").status_code == 302
    assert not SavedPrompt.objects.exists()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"title": "", "body": "x"}, "The title cannot be blank."),
        ({"title": "   ", "body": "x"}, "The title cannot be blank."),
        ({"title": "t", "body": ""}, "The prompt cannot be blank."),
        ({"title": "t" * (MAX_TITLE_CHARS + 1), "body": "x"}, f"at most {MAX_TITLE_CHARS} characters"),
        ({"title": "t", "body": "x" * (MAX_BODY_CHARS + 1)}, f"at most {MAX_BODY_CHARS} characters"),
        ({"body": "x"}, "The title cannot be blank."),
    ],
)
def test_bad_prompts_come_back_inline(
    client: Client, alice: User, data: dict[str, str], message: str
) -> None:
    response = client.post("/prompts/", data)
    assert response.status_code == 400
    html = response.content.decode()
    assert message in html and 'aria-invalid="true"' in html
    assert not SavedPrompt.objects.exists()


def test_a_failed_edit_keeps_the_stored_prompt(client: Client, alice: User) -> None:
    prompt = services.prompt_create(user=alice, title="Keep", body="Original")
    response = client.post(f"/prompts/{prompt.pk}/edit/", {"title": "Keep", "body": ""})
    assert response.status_code == 400 and "The prompt cannot be blank." in response.content.decode()
    prompt.refresh_from_db()
    assert prompt.body == "Original"


def test_only_staff_can_share(client: Client, alice: User) -> None:
    response = client.post("/prompts/", {"title": "Mine", "body": "x", "shared": "on"})
    assert response.status_code == 400
    assert "Only administrators can share prompts." in response.content.decode()
    assert not SavedPrompt.objects.exists()
    with pytest.raises(PermissionDenied):
        services.prompt_create(user=alice, title="Mine", body="x", shared=True)
    # Nor by editing an own prompt.
    prompt = services.prompt_create(user=alice, title="Mine", body="x")
    response = client.post(f"/prompts/{prompt.pk}/edit/", {"title": "Mine", "body": "x", "shared": "on"})
    assert response.status_code == 400
    prompt.refresh_from_db()
    assert not prompt.shared


def test_staff_share_and_everyone_sees_but_only_staff_edit(client: Client, admin: User, bob: User) -> None:
    client.force_login(admin)
    assert "Share with every user" in client.get("/settings/").content.decode()
    assert (
        client.post(
            "/prompts/", {"title": "Team style", "body": "Use our style.", "shared": "on"}
        ).status_code
        == 302
    )
    shared = SavedPrompt.objects.get()
    assert shared.shared

    client.force_login(bob)
    html = client.get("/settings/").content.decode()
    assert "Team style" in html and "shared by admin" in html
    assert f"/prompts/{shared.pk}/edit/" not in html  # no Edit or Delete for bob
    assert "Share with every user" not in html
    assert [p["title"] for p in library(client)] == ["Team style"]
    for url in (f"/prompts/{shared.pk}/edit/", f"/prompts/{shared.pk}/delete/"):
        response = client.post(url, {"title": "Hijacked", "body": "x"})
        assert response.status_code == 403
        assert "Only administrators can" in response.content.decode()
    assert client.get(f"/prompts/{shared.pk}/edit/").status_code == 403
    shared.refresh_from_db()
    assert shared.title == "Team style"

    # Another admin may change a shared prompt, and unsharing makes it its owner's private one again.
    other_admin = User.objects.create_user("admin2", password="pw", is_staff=True)
    client.force_login(other_admin)
    assert (
        client.post(f"/prompts/{shared.pk}/edit/", {"title": "Team style v2", "body": "y"}).status_code == 302
    )
    shared.refresh_from_db()
    assert (shared.title, shared.shared, shared.owner_id) == ("Team style v2", False, admin.pk)
    assert library(client) == []


def test_someone_elses_private_prompt_is_404(client: Client, alice: User, bob: User) -> None:
    secret = services.prompt_create(user=bob, title="Bob's secret", body="hidden text")
    assert client.get(f"/prompts/{secret.pk}/edit/").status_code == 404
    assert client.post(f"/prompts/{secret.pk}/edit/", {"title": "x", "body": "y"}).status_code == 404
    assert client.post(f"/prompts/{secret.pk}/delete/").status_code == 404
    assert client.get("/prompts/999999/edit/").status_code == 404
    assert "hidden text" not in client.get("/settings/").content.decode()
    assert library(client) == []
    secret.refresh_from_db()
    assert secret.title == "Bob's secret"


def test_staff_cannot_see_others_private_prompts_either(client: Client, admin: User, bob: User) -> None:
    secret = services.prompt_create(user=bob, title="Bob's", body="private")
    client.force_login(admin)
    assert client.get(f"/prompts/{secret.pk}/edit/").status_code == 404
    assert library(client) == []


def test_library_json_lists_own_first_then_shared(
    client: Client, alice: User, admin: User, bob: User
) -> None:
    services.prompt_create(user=admin, title="A shared", body="shared body", shared=True)
    services.prompt_create(user=alice, title="Z mine", body="mine body")
    services.prompt_create(user=bob, title="B bob", body="bob body")
    prompts = library(client)
    assert [(p["title"], p["shared"], p["mine"]) for p in prompts] == [
        ("Z mine", False, True),
        ("A shared", True, False),
    ]
    assert set(prompts[0]) == {"id", "title", "body", "shared", "mine"}
    assert client.get("/prompts/library.json").json()["truncated"] is False


def test_library_is_bounded(alice: User, admin: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selectors, "LIBRARY_LIMIT", 3)
    for i in range(4):
        services.prompt_create(user=admin, title=f"S{i}", body="x", shared=True)
    services.prompt_create(user=alice, title="Mine", body="x")
    items, truncated = selectors.prompt_library(user=alice)
    assert [p["title"] for p in items] == ["Mine", "S0", "S1"] and truncated


def test_per_user_prompt_cap(alice: User, client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "MAX_PROMPTS_PER_USER", 2)
    services.prompt_create(user=alice, title="1", body="x")
    services.prompt_create(user=alice, title="2", body="x")
    with pytest.raises(InvalidRequest, match="already have 2 saved prompts"):
        services.prompt_create(user=alice, title="3", body="x")
    response = client.post("/prompts/", {"title": "3", "body": "x"})
    assert response.status_code == 400 and "already have 2 saved prompts" in response.content.decode()
    assert SavedPrompt.objects.filter(owner=alice).count() == 2


def test_prompt_text_is_escaped(client: Client, alice: User) -> None:
    services.prompt_create(user=alice, title="<b>bold</b>", body="<script>alert(1)</script>")
    html = client.get("/settings/").content.decode()
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


def test_wrong_methods(client: Client, alice: User) -> None:
    assert client.get("/prompts/").status_code == 405
    assert client.post("/prompts/library.json").status_code == 405
    prompt = services.prompt_create(user=alice, title="t", body="b")
    assert client.get(f"/prompts/{prompt.pk}/delete/").status_code == 405
