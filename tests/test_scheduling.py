"""tests/scheduling.py: the order files are handed out in, and the rule that keeps reliability tests in
the one folder the reliability step collects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests import scheduling


@dataclass
class Item:
    nodeid: str
    markers: tuple[str, ...] = ()

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


def test_the_slowest_files_go_first_and_the_rest_keep_their_order() -> None:
    slowest = scheduling.SLOWEST_FIRST[0]
    items = [Item("tests/a.py::one"), Item(f"{slowest}::x"), Item("tests/b.py::two")]
    scheduling.pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.nodeid for item in items] == [f"{slowest}::x", "tests/a.py::one", "tests/b.py::two"]


def test_a_reliability_test_outside_its_folder_stops_the_run() -> None:
    inside = Item("tests/reliability/test_stalls.py::test_x", ("reliability",))
    scheduling.pytest_collection_modifyitems([inside])  # type: ignore[list-item]
    stray = Item("tests/webapp/test_x.py::test_y", ("slow", "reliability"))
    with pytest.raises(pytest.UsageError, match=r"tests/webapp/test_x\.py::test_y"):
        scheduling.pytest_collection_modifyitems([inside, stray])  # type: ignore[list-item]
