"""Reads owned by the core app."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from webapp.core.engine_settings import engine_settings_get
from webapp.core.models import ModelRegistration


def users_exist() -> bool:
    return get_user_model().objects.exists()


async def ausers_exist() -> bool:
    return await get_user_model().objects.aexists()


def model_defaults(name: str) -> dict[str, Any]:
    """Sampling defaults (global tuning, overlaid with the model's own) and system prompt for a model name
    or alias: the one layering the API and chat apply. Unregistered names get the global defaults only."""
    tuning = engine_settings_get()
    global_sampling = {
        "temperature": tuning.default_temperature,
        "top_p": tuning.default_top_p,
        "max_tokens": tuning.default_max_tokens,
    }
    sampling = {k: v for k, v in global_sampling.items() if v is not None}
    for row in ModelRegistration.objects.all() if name else []:
        if name == row.name or name in row.aliases:
            own = {k: v for k, v in dict(row.sampling_defaults).items() if v is not None}
            return {"sampling": sampling | own, "system_prompt": row.system_prompt}
    return {"sampling": sampling, "system_prompt": ""}
