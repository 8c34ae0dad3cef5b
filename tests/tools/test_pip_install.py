"""make install's uv step is configured as pip is: the real pip resolves the settings, from a config file
and the environment, and uv's command carries them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tools.pip_install import pip_settings, uv_command, uv_environment


def test_pip_settings_merge_the_file_and_the_environment_which_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\n"
        "index-url = https://mirror.example/simple\n"
        "extra-index-url = file:///srv/a/simple file:///srv/b/simple\n"
        "find-links = /srv/wheels-from-file\n"
        "cert = /etc/ssl/bundle.pem\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", "/srv/wheels-from-env")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "180")
    monkeypatch.delenv("PIP_CERT", raising=False)  # the environment would win over the file's
    settings = pip_settings(sys.executable)
    assert settings["index-url"] == "https://mirror.example/simple"
    assert settings["extra-index-url"] == "file:///srv/a/simple file:///srv/b/simple"
    assert settings["find-links"] == "/srv/wheels-from-env"
    command = uv_command("uv", "/venv/bin/python", settings, ["-e", ".[dev]"])
    assert command[:6] == ["uv", "pip", "install", "--python", "/venv/bin/python", "--compile-bytecode"]
    assert command[-2:] == ["-e", ".[dev]"]
    pairs = list(zip(command[6:-2:2], command[7:-2:2], strict=True))
    assert ("--index-url", "https://mirror.example/simple") in pairs
    assert ("--extra-index-url", "file:///srv/a/simple") in pairs
    assert ("--extra-index-url", "file:///srv/b/simple") in pairs
    assert ("--find-links", "/srv/wheels-from-env") in pairs
    assert ("--index-strategy", "unsafe-best-match") in pairs  # pip's rule: the best version of any index
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("UV_HTTP_TIMEOUT", raising=False)
    env = uv_environment(settings)
    assert env["SSL_CERT_FILE"] == "/etc/ssl/bundle.pem"
    assert env["UV_HTTP_TIMEOUT"] == "180"


def test_without_pip_settings_uv_keeps_its_own_defaults() -> None:
    command = uv_command("uv", "python", {}, ["numpy"])
    assert command == ["uv", "pip", "install", "--python", "python", "--compile-bytecode", "numpy"]
