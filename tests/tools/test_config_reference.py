"""docs/configuration/reference.md is generated from the code (tools/config_reference.py): these fail when
the committed page is stale, or when a setting has no row or no description."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import pytest

from inference.config import YAML_NAMES, EngineConfig
from inference.config_values import DOC
from tools import config_reference
from tools.config_reference import PAGE, REGENERATE, SETTINGS_PACKAGE, render
from tools.settings_env import Computed, Required, env_reads
from webapp.core.config import ServerSettings


def _first_cells() -> set[str]:
    """The first cell of every table row of the committed page, without its backticks."""
    cells = set()
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([^`]+)` \|", line)
        if match:
            cells.add(match.group(1))
    return cells


def test_the_committed_page_is_current() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        f"{PAGE.relative_to(config_reference.ROOT)} is stale: run `{REGENERATE}` and commit it"
    )


def test_every_engine_config_field_has_a_row_and_a_description() -> None:
    yaml_names = {field: key for key, field in YAML_NAMES.items()}
    rows = _first_cells()
    for field in dataclasses.fields(EngineConfig):
        name = yaml_names.get(field.name, field.name)
        assert f"model.{name}" in rows or f"engine.{name}" in rows, f"EngineConfig.{field.name} has no row"
        assert field.metadata.get(DOC), f"EngineConfig.{field.name} has no doc (setting(default, doc))"


def test_every_server_setting_and_variable_has_a_row_and_a_description() -> None:
    rows = _first_cells()
    for name, field in ServerSettings.model_fields.items():
        assert name in rows, f"server setting {name} has no row"
        assert field.description, f"ServerSettings.{name} has no description"
    for read in env_reads(SETTINGS_PACKAGE):
        assert read.variable in rows, f"{read.variable} has no row"
    undocumented = {read.variable for read in env_reads(SETTINGS_PACKAGE)} - {
        read.variable for read in env_reads(SETTINGS_PACKAGE) if read.doc
    }
    assert not undocumented, f"give these a `#:` doc-comment in webapp/settings: {sorted(undocumented)}"


def test_settings_reads_are_found_with_their_defaults_and_own_docs(tmp_path: Path) -> None:
    (tmp_path / "env.py").write_text('def env_int(name, default): ...\nX = env_int("IGNORED", 1)\n')
    # B must not take A's trailing doc; a plain comment is no doc; a "#:" in a string is not a comment.
    source = """\
        A = env_int("A", 5 * 1024)  #: a's doc
        B = env_bool("B", True)
        # a plain comment
        #: c's doc,
        #: on two lines
        C = env_path("C", DATA_DIR / "c")
        D = env_required("D")
        E = f(
            e=env_str("E", ""),  #: e's doc
            s="#: not a comment",
        )
    """
    (tmp_path / "base.py").write_text(textwrap.dedent(source))
    reads = {read.variable: read for read in env_reads(tmp_path)}
    assert set(reads) == {"A", "B", "C", "D", "E"}
    assert (reads["A"].default, reads["A"].kind, reads["A"].doc) == (5120, "integer", "a's doc")
    assert (reads["B"].default, reads["B"].doc) == (True, "")
    assert reads["C"].default == Computed("DATA_DIR / 'c'")  # as ast.unparse writes it
    assert reads["C"].doc == "c's doc, on two lines"
    assert isinstance(reads["D"].default, Required)
    assert reads["E"].doc == "e's doc"


def test_check_fails_on_a_stale_page_and_passes_once_regenerated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "docs" / "reference.md"
    monkeypatch.setattr(config_reference, "PAGE", page)
    monkeypatch.setattr(config_reference, "ROOT", tmp_path)
    assert config_reference.main(["--check"]) == 1  # no page yet
    assert not page.exists() and REGENERATE in capsys.readouterr().err
    assert config_reference.main([]) == 0
    assert config_reference.main(["--check"]) == 0
    page.write_text(page.read_text(encoding="utf-8").replace("| `engine.block_size` |", "| `x` |"))
    assert config_reference.main(["--check"]) == 1
