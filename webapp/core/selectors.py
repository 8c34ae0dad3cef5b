"""Reads owned by the core app."""

from __future__ import annotations

from django.contrib.auth import get_user_model


def users_exist() -> bool:
    return get_user_model().objects.exists()


async def ausers_exist() -> bool:
    return await get_user_model().objects.aexists()
