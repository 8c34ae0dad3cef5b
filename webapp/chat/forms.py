"""Input validation for the chat's HTTP forms (every 400 comes from here)."""

from __future__ import annotations

from typing import Any

from django import forms

from webapp.chat.selectors import available_models
from webapp.chat.services import EMBEDDING_REFUSAL, MAX_TITLE_CHARS, TITLE_BLANK, TITLE_TOO_LONG
from webapp.serving.sampling import CHAT_REPLY_TOKENS, TEMPERATURE, TOP_P


class RenameForm(forms.Form):
    # Spaces alone strip to nothing, which "required" refuses with this message.
    title = forms.CharField(
        max_length=MAX_TITLE_CHARS,
        strip=True,
        error_messages={"required": TITLE_BLANK, "max_length": TITLE_TOO_LONG},
    )


class ModelForm(forms.Form):
    """The header's model picker: "" (the server's default) or a model the manager knows."""

    model = forms.CharField(required=False, max_length=200)

    def __init__(self, *args: Any, user_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user_id = user_id  # whose access decides which models are known

    def clean_model(self) -> str:
        model: str = self.cleaned_data["model"]
        choices = available_models(user_id=self.user_id)
        if model and model in {c.name for c in choices if c.task == "embed"}:
            # The pickers never offer it (selectors.chat_models); a crafted form is told why.
            raise forms.ValidationError(EMBEDDING_REFUSAL.format(model=model))
        known = {choice.name for choice in choices}
        if model and known and model not in known:
            raise forms.ValidationError("Unknown model.")
        return model


class SettingsForm(ModelForm):
    system_prompt = forms.CharField(
        required=False, max_length=32_000, widget=forms.Textarea(attrs={"rows": 3})
    )
    temperature = forms.FloatField(min_value=TEMPERATURE.low, max_value=TEMPERATURE.high)
    # min_value renders the browser's floor; the validator refuses 0 itself (top_p's bound is open).
    top_p = forms.FloatField(min_value=TOP_P.low, max_value=TOP_P.high, validators=[TOP_P.validator()])
    max_tokens = forms.IntegerField(min_value=CHAT_REPLY_TOKENS.low, max_value=CHAT_REPLY_TOKENS.high)


class ImportForm(forms.Form):
    file = forms.FileField()
