"""An admin's own user page offers only what the server carries out (issue #17, defect 9).

Deactivating or demoting oneself is refused by console.users; the page hides those two buttons on one's own
page, keeps them on anyone else's, and the server still refuses a hand-made POST.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from webapp.console.models import AuditLog
from webapp.console.users import toggle_refusal


def toggle_url(user: User, field: str) -> str:
    return reverse("console:user-toggle", args=[user.pk, field])


@pytest.mark.database
def test_own_page_hides_deactivate_and_remove_admin(staff_client: Client, staff: User) -> None:
    page = staff_client.get(reverse("console:user", args=[staff.pk])).content.decode()
    assert toggle_url(staff, "active") not in page and ">Deactivate<" not in page
    assert toggle_url(staff, "staff") not in page and ">Remove admin<" not in page
    assert 'id="own-account-note"' in page
    # Allowed on oneself, so still offered.
    assert reverse("console:user-password", args=[staff.pk]) in page
    assert reverse("console:key-create", args=[staff.pk]) in page


@pytest.mark.database
def test_other_admins_page_keeps_both_buttons_for_an_owner(staff_client: Client, staff: User) -> None:
    other = User.objects.create_user("other-admin", password="other-password-1", is_staff=True)
    page = staff_client.get(reverse("console:user", args=[other.pk])).content.decode()
    assert toggle_url(other, "active") in page and ">Deactivate<" in page
    assert toggle_url(other, "staff") in page and ">Remove admin<" in page
    assert 'id="own-account-note"' not in page


@pytest.mark.database
def test_plain_users_page_offers_make_admin_to_an_owner_only(staff_client: Client, plain: User) -> None:
    page = staff_client.get(reverse("console:user", args=[plain.pk])).content.decode()
    assert ">Make admin<" in page and ">Deactivate<" in page
    admin = User.objects.create_user("mere-admin", password="mere-admin-password-1", is_staff=True)
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("console:user", args=[plain.pk])).content.decode()
    assert ">Make admin<" not in page and ">Deactivate<" in page  # an admin who is no owner makes no admins


def test_the_server_still_refuses_a_posted_self_toggle(staff_client: Client, staff: User) -> None:
    # Refused with the reason on the designed 403 page.
    for field, reason in (("active", "You cannot deactivate"), ("staff", "You cannot demote")):
        response = staff_client.post(toggle_url(staff, field))
        assert response.status_code == 403 and reason in response.content.decode()
    staff.refresh_from_db()
    assert staff.is_active and staff.is_staff
    assert not AuditLog.objects.exists()


def test_refusal_rule() -> None:
    admin = User(pk=1, is_active=True, is_staff=True)
    other = User(pk=2, is_active=True, is_staff=True)
    assert toggle_refusal(actor=admin, user=admin, field="active") == "you cannot deactivate your own account"
    assert toggle_refusal(actor=admin, user=admin, field="staff") == "you cannot demote your own account"
    assert toggle_refusal(actor=admin, user=other, field="active") is None
    assert toggle_refusal(actor=admin, user=other, field="staff") is None


@pytest.mark.database
def test_only_an_owner_creates_an_admin_from_the_users_page(staff_client: Client) -> None:
    admin = User.objects.create_user("mere-admin", password="mere-admin-password-1", is_staff=True)
    client = Client()
    client.force_login(admin)
    page = client.get(reverse("console:users")).content.decode()
    assert "Admin (console access)" not in page and 'type="checkbox" name="is_staff"' not in page
    data = {"username": "sneaky", "password": "a-long-password-42", "is_staff": "on"}
    response = client.post(reverse("console:users"), data)
    assert response.status_code == 400 and "only an owner can make admins" in response.content.decode()
    assert not User.objects.filter(username="sneaky").exists()
    assert not AuditLog.objects.filter(action="user.create").exists()
    # A plain account is still theirs to create; an owner makes admins as before.
    assert client.post(reverse("console:users"), {**data, "is_staff": ""}).status_code == 302
    assert not User.objects.get(username="sneaky").is_staff
    assert "Admin (console access)" in staff_client.get(reverse("console:users")).content.decode()
    staff_client.post(reverse("console:users"), {**data, "username": "made-admin"})
    assert User.objects.get(username="made-admin").is_staff
