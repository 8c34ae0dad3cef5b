"""Input validation for the settings page's forms (every 400 and inline error comes from here)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.models import User

from webapp.preferences.models import MAX_BODY_CHARS, MAX_TITLE_CHARS
from webapp.preferences.selectors import embedding_model_names, model_options
from webapp.preferences.services import EMBEDDING_REFUSAL, MAX_MODEL_CHARS, MAX_SYSTEM_PROMPT_CHARS
from webapp.serving.sampling import CHAT_REPLY_TOKENS, TEMPERATURE, TOP_P


class DefaultsForm(forms.Form):
    """Blank fields mean "the server's default"; the ranges are the chat settings form's."""

    model = forms.CharField(required=False, max_length=MAX_MODEL_CHARS)
    system_prompt = forms.CharField(required=False, max_length=MAX_SYSTEM_PROMPT_CHARS)
    temperature = forms.FloatField(required=False, min_value=TEMPERATURE.low, max_value=TEMPERATURE.high)
    # min_value renders the browser's floor; the validator refuses 0 itself (top_p's bound is open).
    top_p = forms.FloatField(
        required=False, min_value=TOP_P.low, max_value=TOP_P.high, validators=[TOP_P.validator()]
    )
    max_tokens = forms.IntegerField(
        required=False, min_value=CHAT_REPLY_TOKENS.low, max_value=CHAT_REPLY_TOKENS.high
    )

    def __init__(self, *args: Any, user: User | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user  # whose access to models decides which ones are known

    def clean_model(self) -> str:
        model: str = self.cleaned_data["model"].strip()
        if model and model in embedding_model_names(user=self.user):
            raise forms.ValidationError(EMBEDDING_REFUSAL.format(model=model))
        known = {option.name for option in model_options(user=self.user)}
        if model and known and model not in known:
            raise forms.ValidationError("Unknown model: choose one from the list.")
        return model


class PromptForm(forms.Form):
    title = forms.CharField(
        max_length=MAX_TITLE_CHARS, strip=True, error_messages={"required": "The title cannot be blank."}
    )
    body = forms.CharField(
        max_length=MAX_BODY_CHARS, strip=True, error_messages={"required": "The prompt cannot be blank."}
    )
    shared = forms.BooleanField(required=False)

    def __init__(self, *args: Any, can_share: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.can_share = can_share

    def clean_shared(self) -> bool:
        shared: bool = self.cleaned_data["shared"]
        if shared and not self.can_share:
            raise forms.ValidationError("Only administrators can share prompts.")
        return shared
