"""Input for the organise, share and feedback views; services re-check what matters."""

from __future__ import annotations

from django import forms

from webapp.organize.models import FEEDBACK_COMMENT_MAX, FOLDER_NAME_MAX, Feedback


class FolderForm(forms.Form):
    name = forms.CharField(
        max_length=FOLDER_NAME_MAX,
        error_messages={
            "required": "A folder needs a name.",
            "max_length": f"Folder names are at most {FOLDER_NAME_MAX} characters.",
        },
    )


class FlagForm(forms.Form):
    """pinned=1 / archived=1 sets the flag, 0 clears it."""

    on = forms.TypedChoiceField(choices=[("1", "on"), ("0", "off")], coerce=lambda v: v == "1")


class MoveForm(forms.Form):
    # Empty: out of any folder. An id is checked against the user's own folders by the view.
    folder = forms.IntegerField(required=False, min_value=1, error_messages={"invalid": "No such folder."})


class FeedbackForm(forms.Form):
    rating = forms.ChoiceField(
        choices=Feedback.Rating.choices,
        error_messages={
            "required": "Choose thumbs up or thumbs down.",
            "invalid_choice": "Choose thumbs up or thumbs down.",
        },
    )
    comment = forms.CharField(
        required=False,
        strip=True,
        max_length=FEEDBACK_COMMENT_MAX,
        error_messages={"max_length": f"Comments are at most {FEEDBACK_COMMENT_MAX} characters."},
    )


class FeedbackFilterForm(forms.Form):
    rating = forms.ChoiceField(required=False, choices=[("", "Any rating"), *Feedback.Rating.choices])
    model = forms.CharField(required=False, max_length=200)
