"""The migration that makes a model's restriction its own flag keeps every restricted model restricted."""

from __future__ import annotations

import pytest

from tests.webapp.migrations import migrate_back_to, migrate_forward
from webapp.core.models import ModelRegistration

BEFORE = [("core", "0006_site_settings")]


@pytest.mark.database
@pytest.mark.django_db(transaction=True)
def test_models_with_groups_stay_restricted_and_the_rest_stay_open() -> None:
    apps = migrate_back_to(BEFORE)
    registration = apps.get_model("core", "ModelRegistration")
    group = apps.get_model("auth", "Group").objects.create(name="lab")
    registration.objects.create(name="secret", source="default").allowed_groups.add(group)
    registration.objects.create(name="open", source="default")
    migrate_forward()
    flags = dict(ModelRegistration.objects.values_list("name", "restricted"))
    assert flags == {"secret": True, "open": False}
