"""Console forms for the organisation: groups (members, policy), model access, and the usage report."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import Group

_NONE = "Empty: none."


class GroupCreateForm(forms.Form):
    name = forms.CharField(max_length=150)
    description = forms.CharField(max_length=200, required=False)


class GroupRenameForm(forms.Form):
    name = forms.CharField(max_length=150)


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150, label="Add member")


class GroupPolicyForm(forms.Form):
    description = forms.CharField(max_length=200, required=False)
    requests_per_minute = forms.IntegerField(required=False, min_value=1, help_text=_NONE)
    tokens_per_minute = forms.IntegerField(required=False, min_value=1, help_text=_NONE)
    max_concurrent_requests = forms.IntegerField(
        required=False, min_value=1, help_text="Streams the members may run at once, together. " + _NONE
    )
    daily_token_quota = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=10**15,
        help_text="Prompt plus generated tokens of all members per UTC day. " + _NONE,
    )
    api_keys_allowed = forms.BooleanField(
        required=False,
        label="Members may create their own API keys",
        help_text="Even while the Site page's switch is off.",
    )


class ModelAccessForm(forms.Form):
    groups = forms.ModelMultipleChoiceField(
        queryset=Group.objects.order_by("name"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every user may use the model. Admins may always use it.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read per form: groups made since the module loaded must be offered.
        groups = self.fields["groups"]
        assert isinstance(groups, forms.ModelMultipleChoiceField)
        groups.queryset = Group.objects.order_by("name")


MAX_RANGE_DAYS = 366
DIMENSIONS = [("day", "day"), ("user", "user"), ("group", "group"), ("model", "model"), ("source", "source")]
SORTS = ["key", "requests", "errors", "prompt_tokens", "completion_tokens", "total_tokens"]


class UsageFilterForm(forms.Form):
    """The usage report's query: a date range, what to break it down by, narrowing filters, a sort."""

    start = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))
    by = forms.ChoiceField(choices=DIMENSIONS, required=False, label="Per")
    user = forms.CharField(required=False, max_length=150)
    group = forms.CharField(required=False, max_length=150)
    model = forms.CharField(required=False, max_length=200)
    source = forms.ChoiceField(required=False, choices=[("", "any"), ("api", "API"), ("chat", "chat")])
    sort = forms.ChoiceField(required=False, choices=[(s, s) for s in SORTS] + [(f"-{s}", s) for s in SORTS])

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        start, end = data.get("start"), data.get("end")
        if start and end:
            if start > end:
                raise forms.ValidationError("'From' must be on or before 'To'.")
            if (end - start).days >= MAX_RANGE_DAYS:
                raise forms.ValidationError(f"Choose a range of at most {MAX_RANGE_DAYS} days.")
        return data


class SiteSettingsForm(forms.Form):
    default_system_prompt = forms.CharField(
        required=False,
        max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="New chats start with it, unless the user set a default of their own in their settings.",
    )
    banner_text = forms.CharField(
        required=False,
        max_length=500,
        label="Banner",
        help_text="Shown atop every page to every signed-in user until they dismiss it. Empty: none.",
    )
    banner_level = forms.ChoiceField(choices=[("info", "information"), ("warning", "warning")], label="Kind")
    user_api_keys = forms.BooleanField(
        required=False,
        label="Users may create their own API keys",
        help_text="In their Settings, shown once, revocable. Off: only admins issue keys (a group's policy "
        "can still allow its members).",
    )
