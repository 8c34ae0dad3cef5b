"""What the console shows of an unloaded model, and the confirmation asked before destructive actions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from inference import ModelManager
from tests.webapp.console.conftest import MIB, SizedFakeEngine
from webapp.accounts.models import ApiKey
from webapp.console.registry import sync_manager
from webapp.serving.model_states import state_label


def row_of(html: str, name: str) -> str:
    return html.split(f'data-model="{name}"', 1)[1].split("</tr>", 1)[0]


def memory_and_kv_cells(html: str, name: str) -> list[str]:
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row_of(html, name), re.DOTALL)
    return cells[7:9]  # the Memory and KV tokens columns


@pytest.mark.database
def test_unload_clears_the_memory_and_kv_figures(
    staff_client: Client, manager: ModelManager, engines: list[SizedFakeEngine]
) -> None:
    manager.load("base")
    loaded = next(i for i in manager.list() if i.name == "base")
    assert loaded.memory_bytes == 100 * MIB and loaded.kv_capacity_tokens == 4096
    sync_manager()
    html = staff_client.get(reverse("console:models-table")).content.decode()
    assert memory_and_kv_cells(html, "base") == ["100.0 MiB", "4096"]

    manager.unload("base")
    unloaded = next(i for i in manager.list() if i.name == "base")
    assert unloaded.state == "available"
    assert unloaded.memory_bytes is None and unloaded.kv_capacity_tokens is None
    html = staff_client.get(reverse("console:models-table")).content.decode()
    assert memory_and_kv_cells(html, "base") == ["—", "—"]
    assert "90.0 MiB" in row_of(html, "base")  # the size on disk is still known


def test_a_reload_still_makes_room_from_the_last_footprint(manager: ModelManager) -> None:
    manager.load("base")
    manager.unload("base")
    manager.memory_budget_bytes = 50 * MIB  # the last load took 100 MiB: refused before a new engine starts
    try:
        manager.load("base")
    except Exception as exc:
        assert "needs 104857600 bytes" in str(exc)
    else:
        raise AssertionError("the load should have been refused")


@pytest.mark.database
def test_available_reads_not_loaded_on_the_models_page(staff_client: Client, manager: ModelManager) -> None:
    sync_manager()
    row = row_of(staff_client.get(reverse("console:models")).content.decode(), "base")
    assert 'data-state="available"' in row  # attributes keep the API's value
    assert '<span class="badge state-available">not loaded (loads when picked)</span>' in row
    assert state_label("available") == "not loaded (loads when picked)" and state_label("loaded") == "ready"


@pytest.mark.database
def test_unload_asks_first(staff_client: Client, manager: ModelManager) -> None:
    manager.load("base")
    sync_manager()
    row = row_of(staff_client.get(reverse("console:models-table")).content.decode(), "base")
    unload = reverse("console:model-unload", args=["base"])
    assert re.search(rf'<button[^>]*hx-post="{unload}"[^>]*hx-confirm="Unload base\?"[^>]*>Unload<', row)


@pytest.mark.database
def test_revoke_and_reset_password_ask_first(staff_client: Client, plain: User) -> None:
    staff_client.post(reverse("console:key-create", args=[plain.pk]), {"name": "ci"})
    key = ApiKey.objects.get(user=plain)
    page = staff_client.get(reverse("console:user", args=[plain.pk])).content.decode()
    revoke = reverse("console:key-revoke", args=[key.pk])
    assert f'action="{revoke}" data-confirm="Revoke key {key.prefix}… (ci)?"' in page
    reset = reverse("console:user-password", args=[plain.pk])
    assert f'action="{reset}" data-confirm="Reset the password of pat?"' in page
    # The handler comes from a static file (the CSP runs no inline script) and honours the attribute.
    assert '<script src="/static/console/confirm.js" defer></script>' in page
    script = Path(settings.BASE_DIR, "static", "console", "confirm.js").read_text(encoding="utf-8")
    assert "dataset.confirm" in script and "window.confirm" in script and "preventDefault" in script
