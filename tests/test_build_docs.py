"""The documentation site: every page of docs/ is in mkdocs.yml's nav (the strict build and the app's
sidebar both rely on it), and the docs step fails on a broken link."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests import build_docs, suites

ROOT = build_docs.REPO_ROOT


def _nav_pages(items: Any) -> set[str]:
    pages: set[str] = set()
    for item in items:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            pages |= {value} if isinstance(value, str) else _nav_pages(value)
    return pages


def test_every_page_is_in_the_nav_and_every_nav_entry_exists() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = _nav_pages(config["nav"])
    on_disk = {str(path.relative_to(ROOT / "docs")) for path in (ROOT / "docs").rglob("*.md")}
    assert on_disk - listed == set(), "pages missing from mkdocs.yml's nav"
    assert listed - on_disk == set(), "nav entries without a page"


def test_the_readme_stays_a_router() -> None:
    """The README routes to docs/ (issue 48): about 200 lines at most, every link to a page that exists."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    import re

    targets = {link.split("#")[0] for link in re.findall(r"\]\(([^)\s]+)\)", readme)}
    missing = [t for t in targets if not t.startswith("http") and not (ROOT / t).exists()]
    assert not missing, missing


def test_the_docs_step_runs_beside_unit() -> None:
    (step,) = [step for step in suites.steps(1) if step.name == "docs"]
    assert step.beside == "unit" and step.command[-1] == "tests.build_docs"


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    assert build_docs.main(tmp_path) == 0
    page = tmp_path / "docs" / "index.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](no-such-page.md)\n", encoding="utf-8")
    assert build_docs.main(tmp_path) != 0
