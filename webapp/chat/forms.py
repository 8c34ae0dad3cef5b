"""Input validation for the chat's HTTP forms (every 400 comes from here)."""

from __future__ import annotations

from django import forms

from webapp.chat.selectors import available_models


class RenameForm(forms.Form):
    title = forms.CharField(max_length=200, strip=True)


class SettingsForm(forms.Form):
    system_prompt = forms.CharField(
        required=False, max_length=32_000, widget=forms.Textarea(attrs={"rows": 3})
    )
    model = forms.CharField(required=False, max_length=200)
    temperature = forms.FloatField(min_value=0.0, max_value=2.0)
    top_p = forms.FloatField(min_value=0.01, max_value=1.0)
    max_tokens = forms.IntegerField(min_value=1, max_value=32_768)

    def clean_model(self) -> str:
        model: str = self.cleaned_data["model"]
        known = {choice.name for choice in available_models()}
        if model and known and model not in known:
            raise forms.ValidationError("Unknown model.")
        return model


class ImportForm(forms.Form):
    file = forms.FileField()
