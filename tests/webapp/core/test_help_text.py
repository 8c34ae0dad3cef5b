"""Form help text as users read it: `code` spans as <code> (escaped), password rules in plain words."""

from __future__ import annotations

import pytest
from django.template import engines
from django.test import override_settings

from webapp.console.forms import RegisterLocalForm, TuningForm, help_html
from webapp.console.user_forms import UserCreateForm

# What the console templates do with help text (templates/console/*.html).
HELP = engines["django"].from_string(
    '{% for field in form %}<span class="help">{{ field.help_text }}</span>{% endfor %}'
)


def test_backticks_become_code() -> None:
    assert help_html("Pass `model` or `a<b>`.") == "Pass <code>model</code> or <code>a&lt;b&gt;</code>."
    assert (
        help_html("No code, <b>bold</b> & 'quotes'")
        == "No code, &lt;b&gt;bold&lt;/b&gt; &amp; &#x27;quotes&#x27;"
    )
    assert help_html("An odd ` stays") == "An odd ` stays"


@pytest.mark.django_db  # the user form lists the groups there are
def test_no_help_text_shows_raw_backticks() -> None:
    for form in (RegisterLocalForm(), UserCreateForm()):
        html = HELP.render({"form": form})
        assert "`" not in html
    html = HELP.render({"form": RegisterLocalForm()})
    assert "What API clients pass as <code>model</code>." in html


@pytest.mark.django_db
def test_tuning_help_has_no_raw_backticks() -> None:
    assert "`" not in HELP.render({"form": TuningForm()})


@pytest.mark.django_db  # the user form lists the groups there are
def test_password_help_states_the_rules() -> None:
    help_text = UserCreateForm()["password"].help_text
    assert "validator" not in help_text.lower()
    assert "at least 8 characters" in help_text
    assert "commonly used" in help_text and "numeric" in help_text


@override_settings(
    AUTH_PASSWORD_VALIDATORS=[
        {
            "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
            "OPTIONS": {"min_length": 14},
        }
    ]
)
@pytest.mark.django_db  # the user form lists the groups there are
def test_password_help_follows_the_configured_validators() -> None:
    help_text = UserCreateForm()["password"].help_text
    assert "at least 14 characters" in help_text and "numeric" not in help_text


@override_settings(AUTH_PASSWORD_VALIDATORS=[])
@pytest.mark.django_db  # the user form lists the groups there are
def test_password_help_without_validators() -> None:
    assert UserCreateForm()["password"].help_text == "Any password is accepted."
