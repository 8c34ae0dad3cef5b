"""The console's Add user form sets the new user's email and groups; the user page shows their groups.

The rule of console.users and console.groups holds at creation too: only an owner makes an admin, and so
only an owner puts a new admin into groups; an admin who is no owner gives a new plain user groups freely.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from webapp.console import groups as group_services
from webapp.console import users as user_services
from webapp.console.models import AuditLog

pytestmark = [pytest.mark.django_db, pytest.mark.database]
PASSWORD = "a-long-password-42"


@pytest.fixture
def teams() -> tuple[Group, Group]:
    return group_services.group_create(name="research"), group_services.group_create(name="support")


@pytest.fixture
def admin() -> User:
    """An admin who is no owner."""
    return User.objects.create_user("ada", password="ada-password-1", is_staff=True)


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_service_sets_email_and_groups(staff: User, teams: tuple[Group, Group]) -> None:
    research, support = teams
    user = user_services.user_create(
        actor=staff,
        username="newbie",
        password=PASSWORD,
        email=" new@example.com ",
        groups=[research, support],
    )
    user.refresh_from_db()
    assert user.email == "new@example.com"
    assert set(user.groups.values_list("name", flat=True)) == {"research", "support"}
    # An owner may put a new admin into groups.
    boss = user_services.user_create(
        actor=staff, username="boss", password=PASSWORD, is_staff=True, groups=[support]
    )
    assert list(boss.groups.values_list("name", flat=True)) == ["support"]


def test_an_admin_gives_a_new_user_groups_but_makes_no_admin(admin: User, teams: tuple[Group, Group]) -> None:
    research, _ = teams
    user = user_services.user_create(actor=admin, username="pat", password=PASSWORD, groups=[research])
    assert list(user.groups.all()) == [research]
    with pytest.raises(user_services.UserActionError, match="only an owner"):
        user_services.user_create(
            actor=admin, username="eve", password=PASSWORD, is_staff=True, groups=[research]
        )
    assert not User.objects.filter(username="eve").exists()


def test_a_taken_email_or_a_weak_password_creates_nothing(staff: User, teams: tuple[Group, Group]) -> None:
    User.objects.create_user("first", email="Team@Example.com", password=PASSWORD)
    with pytest.raises(user_services.UserActionError, match="another account has the email"):
        user_services.user_create(actor=staff, username="second", password=PASSWORD, email="team@example.COM")
    with pytest.raises(ValidationError):
        user_services.user_create(actor=staff, username="third", password="123", groups=list(teams))
    assert not User.objects.filter(username__in=["second", "third"]).exists()
    assert not Group.objects.filter(user__username="third").exists()


def test_the_form_offers_groups_only_when_there_are_some(staff_client: Client) -> None:
    assert 'id="user-create-groups"' not in staff_client.get(reverse("console:users")).content.decode()
    group_services.group_create(name="research")
    html = staff_client.get(reverse("console:users")).content.decode()
    form = html.split('id="user-create"', 1)[1].split("</form>", 1)[0]
    assert (
        'id="user-create-groups"' in form and 'type="checkbox" name="groups"' in form and "research" in form
    )
    assert 'type="email" name="email"' in form


def test_create_with_email_and_groups_and_see_them(
    staff_client: Client, staff: User, teams: tuple[Group, Group]
) -> None:
    research, _ = teams
    data = {
        "username": "newbie",
        "password": PASSWORD,
        "email": "newbie@example.com",
        "groups": [research.pk],
    }
    response = staff_client.post(reverse("console:users"), data)
    user = User.objects.get(username="newbie")
    assert response.status_code == 302 and response["Location"] == reverse("console:user", args=[user.pk])
    assert user.email == "newbie@example.com" and list(user.groups.all()) == [research]
    entry = AuditLog.objects.get(action="user.create")
    assert entry.after == {"is_staff": False, "email": "newbie@example.com", "groups": ["research"]}

    page = staff_client.get(reverse("console:user", args=[user.pk])).content.decode()
    shown = page.split('id="user-groups"', 1)[1].split("</p>", 1)[0]
    assert f'href="{reverse("console:group", args=[research.pk])}"' in shown and ">research<" in shown
    assert "support" not in shown
    assert '<span id="user-email">newbie@example.com</span>' in page
    # Someone in no group: the page says so.
    assert (
        "none"
        in staff_client.get(reverse("console:user", args=[staff.pk]))
        .content.decode()
        .split('id="user-groups"', 1)[1]
        .split("</p>", 1)[0]
    )


@pytest.mark.parametrize(
    ("email", "reason"),
    [
        ("not-an-email", "Enter a valid email address."),
        ("TAKEN@example.com", "Another account has this email."),
    ],
)
def test_bad_emails_are_refused_inline(
    staff_client: Client, teams: tuple[Group, Group], email: str, reason: str
) -> None:
    User.objects.create_user("first", email="taken@example.com", password=PASSWORD)
    data = {"username": "newbie", "password": PASSWORD, "email": email, "groups": [teams[0].pk]}
    response = staff_client.post(reverse("console:users"), data)
    assert response.status_code == 400 and reason in response.content.decode()
    assert not User.objects.filter(username="newbie").exists()


def test_an_unknown_group_is_refused_inline(staff_client: Client, teams: tuple[Group, Group]) -> None:
    data = {"username": "newbie", "password": PASSWORD, "groups": ["99999"]}
    response = staff_client.post(reverse("console:users"), data)
    assert response.status_code == 400 and "not one of the available choices" in response.content.decode()
    assert not User.objects.filter(username="newbie").exists()


def test_an_admin_who_is_no_owner_creates_a_user_in_groups(admin: User, teams: tuple[Group, Group]) -> None:
    research, _ = teams
    client = _client(admin)
    data = {"username": "pat", "password": PASSWORD, "groups": [research.pk]}
    assert client.post(reverse("console:users"), data).status_code == 302
    assert list(User.objects.get(username="pat").groups.all()) == [research]
    # A posted "admin" box is still refused, groups or not.
    data = {"username": "eve", "password": PASSWORD, "is_staff": "on", "groups": [research.pk]}
    refused = client.post(reverse("console:users"), data)
    assert refused.status_code == 400 and "only an owner can make admins" in refused.content.decode()
    assert not User.objects.filter(username="eve").exists()
