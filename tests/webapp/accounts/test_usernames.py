"""A new username can neither be nor pass for an existing one (accounts.usernames): normalised (NFKC),
compared by skeleton (homoglyphs, accents and case folded away), and of one alphabet. On every path that
names an account: the sign-up form, the console's Add user, and a first single sign-on."""

# Look-alike letters are what these tests are about.
# ruff: noqa: RUF003

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from webapp.accounts.models import SignupSettings
from webapp.accounts.signup import sso_user_sign_in
from webapp.accounts.usernames import new_username_problem, scripts_of, skeleton
from webapp.console.users import UserActionError, user_create

pytestmark = [pytest.mark.django_db, pytest.mark.database]

PASSWORD = "a-long-pass-phrase-9"
CYRILLIC_E = "\u0435"
GREEK_OMICRON = "\u03bf"


def _sign_up(username: str) -> tuple[int, str]:
    response = Client().post(
        "/signup/",
        {"username": username, "email": f"x{len(username)}@example.org", "password1": PASSWORD,
         "password2": PASSWORD},
    )  # fmt: skip
    text = response.content.decode()
    errors = text[text.index('id="username-errors"') :] if 'id="username-errors"' in text else ""
    return response.status_code, errors[: errors.find("</ul>")]


@pytest.fixture
def owner(signup_on: SignupSettings) -> User:
    return User.objects.create_user("owner", password=PASSWORD, is_staff=True, is_superuser=True)


@pytest.mark.parametrize(
    "lookalike",
    [
        f"own{CYRILLIC_E}r",  # the issue's: a Cyrillic e (U+0435)
        f"{GREEK_OMICRON}wner",  # a Greek omicron
        "\u043ewner",  # a Cyrillic o (U+043E)
        "0wner",
        "ówner",
        "\uff4f\uff57\uff4e\uff45\uff52",  # full-width "owner" (NFKC makes it "owner")
        "\U0001d428\U0001d430\U0001d427\U0001d41e\U0001d42b",  # mathematical bold 𝐨𝐰𝐧𝐞𝐫
        "OWNER",
        "owner",
    ],
)
def test_sign_up_refuses_a_lookalike_of_an_existing_name(owner: User, lookalike: str) -> None:
    before = User.objects.count()
    status, errors = _sign_up(lookalike)
    assert status == 400, lookalike
    assert "taken" in errors or "letters of one alphabet" in errors, errors
    assert User.objects.count() == before


def test_the_issues_name_is_refused_as_mixed_alphabets(owner: User) -> None:
    status, errors = _sign_up(f"own{CYRILLIC_E}r")
    assert status == 400 and "mixes Latin and Cyrillic letters" in errors


def test_a_lookalike_in_one_alphabet_is_refused_as_taken(owner: User) -> None:
    one_script = "\u0440\u0430\u0441\u0435"  # "расе", all Cyrillic, looks like "pace"
    User.objects.create_user("pace")
    status, errors = _sign_up(one_script)
    assert status == 400 and "looks too much like one that is taken" in errors


@pytest.mark.parametrize("name", ["newbie", "Владимир", "José", "小明", "ada.lovelace+ml", "owner-2"])
def test_other_names_are_welcome(owner: User, name: str) -> None:
    status, errors = _sign_up(name)
    assert status in (200, 302), errors
    assert User.objects.filter(username=name).exists()


def test_names_are_stored_normalised(owner: User) -> None:
    status, _ = _sign_up("\uff4e\uff45\uff57\uff42\uff49\uff45")  # full-width ｎｅｗｂｉｅ
    assert status in (200, 302)
    assert User.objects.filter(username="newbie").exists()


def test_the_console_refuses_a_lookalike(owner: User) -> None:
    with pytest.raises(UserActionError, match="mixes Latin and Cyrillic"):
        user_create(actor=owner, username=f"own{CYRILLIC_E}r", password=PASSWORD)
    with pytest.raises(UserActionError, match="looks too much like"):
        user_create(actor=owner, username="0wner", password=PASSWORD)
    assert user_create(actor=owner, username="operator", password=PASSWORD).username == "operator"


def test_single_sign_on_never_names_an_account_after_a_lookalike(owner: User) -> None:
    def sign_in(subject: str, preferred: str) -> User:
        claims = {"sub": subject, "email": f"{subject}@corp.example", "preferred_username": preferred}
        return sso_user_sign_in(
            issuer="https://idp.example", claims=claims, allowed_domains=[], groups_claim=""
        )

    assert sign_in("a", f"own{CYRILLIC_E}r").username == "owner-2"
    assert sign_in("b", "0WNER").username == "0WNER-3"  # "0WNER-2" passes for the "owner-2" just made
    assert sign_in("c", "ada").username == "ada"


def test_skeletons() -> None:
    assert skeleton(f"own{CYRILLIC_E}r") == skeleton("Owner") == "owner"
    assert scripts_of(f"own{CYRILLIC_E}r") == ["LATIN", "CYRILLIC"] and scripts_of("Владимир") == ["CYRILLIC"]
    assert skeleton("Ian") == skeleton("lan") != skeleton("ian")  # a capital I is an l; case folds
    assert skeleton("rnary") == skeleton("mary")
    assert skeleton("ow\u200dner") == "owner"  # a zero-width joiner
    assert new_username_problem("someone-new") is None
