"""The console checks an uploaded or found GGUF through inference.manager.gguf_check: from the header alone,
without torch (the web process imports it on every models page)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from inference.manager.gguf_check import gguf_problem
from inference.models.loader.source import default_gguf_path
from tests.webapp.console.test_uploads import write_gguf


def test_the_bundled_model_passes_and_others_say_why(tmp_path: Path) -> None:
    assert gguf_problem(default_gguf_path()) == ""
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    assert gguf_problem(empty).startswith("empty.gguf is not a GGUF file")
    text = tmp_path / "text.gguf"
    text.write_text("hello world, not a model", encoding="utf-8")
    assert gguf_problem(text) == "text.gguf is not a GGUF file"
    whole = write_gguf(tmp_path / "whole.gguf")
    (tmp_path / "cut.gguf").write_bytes(whole[: len(whole) // 2])
    assert "cut.gguf" in gguf_problem(tmp_path / "cut.gguf")
    write_gguf(tmp_path / "rwkv.gguf", arch="rwkv6")
    assert "'rwkv6' is not supported (supported: gemma2" in gguf_problem(tmp_path / "rwkv.gguf")


def test_the_check_and_load_progress_import_no_torch() -> None:
    code = (
        "import sys, inference.manager.gguf_check, inference.progress; "
        "sys.exit('torch' in sys.modules or 'django' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
