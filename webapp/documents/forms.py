"""Input validation for the documents pages' forms."""

from __future__ import annotations

from django import forms


class CollectionForm(forms.Form):
    name = forms.CharField(
        max_length=120, strip=True, error_messages={"required": "Give the collection a name."}
    )


class AttachCollectionForm(forms.Form):
    collection = forms.IntegerField(min_value=1, error_messages={"required": "Choose a collection."})


class AttachToChatForm(forms.Form):
    conversation = forms.IntegerField(min_value=1, error_messages={"required": "Choose a chat."})
