"""`{{ info.state|model_state }}` (or `|model_state:trouble`): a model's state in the one vocabulary of
webapp.serving.model_states, for every template that names one."""

from __future__ import annotations

from django import template

from webapp.serving.model_states import state_label

register = template.Library()


@register.filter
def model_state(state: str, trouble: str | None = None) -> str:
    return state_label(str(state), trouble or None)
