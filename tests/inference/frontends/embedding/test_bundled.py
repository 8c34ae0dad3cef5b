"""The bundled embedding model's archive is unpacked only as the expected files, privately, once."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from inference.frontends.embedding import bundled
from inference.frontends.embedding.bundled import BundledModelError, bundled_model_dir

GOOD = {
    "config.json": "{}",
    "model.safetensors": "weights",
    "tokenizer.json": "{}",
    "1_Pooling/config.json": "{}",
}


def _archive(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("1_Pooling/", "")  # folders, as the real archive lists them
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def test_the_expected_files_are_unpacked_privately_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = _archive(tmp_path / "model.zip", GOOD)
    monkeypatch.setattr(bundled, "bundled_zip", lambda: archive)
    folder = bundled_model_dir(tmp_path / "cache")
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == sorted(GOOD)
    assert (folder / "model.safetensors").stat().st_mode & 0o077 == 0
    assert folder.stat().st_mode & 0o077 == 0
    (folder / "model.safetensors").write_text("kept")
    assert bundled_model_dir(tmp_path / "cache") == folder  # not unpacked again
    assert (folder / "model.safetensors").read_text() == "kept"


@pytest.mark.parametrize(
    "bad",
    ["../escape.json", "/etc/config.json", "pytorch_model.bin", "1_Pooling/../../config.json", "run.py"],
)
def test_any_other_entry_refuses_the_whole_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    archive = _archive(tmp_path / "model.zip", {**GOOD, bad: "x"})
    monkeypatch.setattr(bundled, "bundled_zip", lambda: archive)
    with pytest.raises(BundledModelError, match="unexpected entry"):
        bundled_model_dir(tmp_path / "cache")
    assert not list((tmp_path / "cache" / "embedding").iterdir())  # nothing left behind


def test_an_archive_without_weights_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = _archive(tmp_path / "model.zip", {"config.json": "{}", "tokenizer.json": "{}"})
    monkeypatch.setattr(bundled, "bundled_zip", lambda: archive)
    with pytest.raises(BundledModelError, match=r"lacks model\.safetensors"):
        bundled_model_dir(tmp_path / "cache")
