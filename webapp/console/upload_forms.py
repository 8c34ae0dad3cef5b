"""The upload's start request: the browser's file name and size (webapp.console.uploads checks the rest)."""

from __future__ import annotations

from django import forms

from webapp.console.uploads import UploadError, upload_name


class UploadStartForm(forms.Form):
    name = forms.CharField(max_length=255, strip=False)
    size = forms.IntegerField(min_value=1)

    def clean_name(self) -> str:
        try:
            return upload_name(self.cleaned_data["name"])
        except UploadError as exc:
            raise forms.ValidationError(str(exc)) from exc
