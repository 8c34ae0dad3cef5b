"""The decode kernel's library: built at install time, and loaded only from a private, owned folder."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from inference.cache_dir import UnsafeCacheError
from inference.models.kernels import build as kernel_build
from inference.models.kernels import library
from inference.models.quantization import amx_tiles as tile_linear
from inference.models.quantization.gguf import avx512 as q4_decode

needs_cpu = pytest.mark.skipif(not kernel_build.cpu_supported(), reason="the kernel needs AVX512-BF16")


@pytest.fixture(scope="module")
def built(test_cache_dir: Path) -> Path:
    """The test cache's real library (compiled there once per source and torch)."""
    return kernel_build.ensure_built(test_cache_dir)


@pytest.fixture
def cache_with_library(tmp_path: Path, built: Path) -> Path:
    """A private cache holding a copy of the library, under the name this source and torch give it."""
    cache = tmp_path / "cache"
    kernels = kernel_build.kernels_dir(cache)
    kernels.mkdir(parents=True, mode=0o700)
    shutil.copy2(built, kernel_build.library_path(cache))
    return cache


@pytest.fixture
def unloaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a fresh process: no library loaded yet (torch cannot unload the one this process has)."""
    monkeypatch.setattr(library, "_loaded", {})
    monkeypatch.setattr(library, "_checked", {})


def test_a_private_library_is_taken_as_it_is(cache_with_library: Path) -> None:
    assert kernel_build.ensure_built(cache_with_library) == kernel_build.library_path(cache_with_library)


@pytest.mark.parametrize("mode", [0o770, 0o777])
def test_a_library_in_a_folder_others_may_write_is_refused(cache_with_library: Path, mode: int) -> None:
    kernel_build.kernels_dir(cache_with_library).chmod(mode)
    with pytest.raises(UnsafeCacheError, match="writable by group or others"):
        kernel_build.ensure_built(cache_with_library)


def test_a_library_others_may_write_is_refused(cache_with_library: Path) -> None:
    kernel_build.library_path(cache_with_library).chmod(0o775)
    with pytest.raises(UnsafeCacheError, match="writable by group or others"):
        kernel_build.ensure_built(cache_with_library)


def test_a_library_someone_else_owns_is_refused(cache_with_library: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a file to another user needs root (test_cache_dir covers the owner check)")
    os.chown(kernel_build.library_path(cache_with_library), 65534, -1)
    with pytest.raises(UnsafeCacheError, match="owned by uid 65534"):
        kernel_build.ensure_built(cache_with_library)


@needs_cpu
@pytest.mark.usefixtures("unloaded")
def test_the_engine_falls_back_and_says_why(
    cache_with_library: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kernel_build.kernels_dir(cache_with_library).chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="inference.models.kernels.library"):
        assert q4_decode.load_kernel(cache_with_library) is None
    assert (
        "AVX512 GGUF block kernels unavailable" in caplog.text
        and "writable by group or others" in caplog.text
    )
    assert library._loaded == {}  # nothing from that folder was loaded


@pytest.mark.skipif(not tile_linear.cpu_has_amx(), reason="the tile linears are only tried on AMX CPUs")
@pytest.mark.usefixtures("unloaded")
def test_the_tile_linears_fall_back_and_say_why(
    cache_with_library: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kernel_build.kernels_dir(cache_with_library).chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="inference.models.kernels.library"):
        assert not tile_linear.load_tiles(cache_with_library)
    assert "AMX tile linears unavailable" in caplog.text and "writable by group or others" in caplog.text
    assert library._loaded == {}


def fake_compiler(calls: list[list[str]], *, returncode: int = 0) -> Any:
    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        Path(command[command.index("-o") + 1]).write_bytes(b"\x7fELF")
        return subprocess.CompletedProcess(command, returncode, "", "error: nope" if returncode else "")

    return run


def test_a_build_writes_a_private_temp_file_then_renames_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    monkeypatch.setattr(kernel_build.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(kernel_build.subprocess, "run", fake_compiler(calls))
    cache = tmp_path / "cache"
    library = kernel_build.ensure_built(cache, compiler="my-c++")
    assert all(call[0] == "/usr/bin/my-c++" for call in calls)
    *compiles, link = calls
    # Each source compiled on its own into an object of a private build folder, then one link.
    assert sorted(call[call.index("-c") + 1] for call in compiles) == sorted(
        map(str, kernel_build.AVX512_LIBRARY.sources)
    )
    objects = [call[call.index("-o") + 1] for call in compiles]
    assert all(obj in link for obj in objects) and "-shared" in link
    assert all(Path(obj).parent.name.startswith(".mooncake_avx512-build-") for obj in objects)
    partial = Path(link[link.index("-o") + 1])
    assert partial.parent == library.parent and partial.name.startswith(".mooncake_avx512-")
    assert str(os.getpid()) not in partial.name  # mkstemp's random name, not a guessable one
    assert library.read_bytes() == b"\x7fELF" and library.stat().st_mode & 0o777 == 0o700
    assert cache.stat().st_mode & 0o777 == 0o700 and library.parent.stat().st_mode & 0o777 == 0o700
    assert sorted(p.name for p in library.parent.iterdir()) == [library.name]


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_build.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(kernel_build.subprocess, "run", fake_compiler([], returncode=1))
    with pytest.raises(OSError, match=r"compiling csrc/avx512/ failed: error: nope"):
        kernel_build.ensure_built(tmp_path / "cache")
    assert list(kernel_build.kernels_dir(tmp_path / "cache").iterdir()) == []


def test_a_failed_link_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiles = fake_compiler([])

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        result = compiles(command)
        return result if "-c" in command else subprocess.CompletedProcess(command, 1, "", "undefined symbol")

    monkeypatch.setattr(kernel_build.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(kernel_build.subprocess, "run", run)
    with pytest.raises(OSError, match=r"linking csrc/avx512/ failed: undefined symbol"):
        kernel_build.ensure_built(tmp_path / "cache")
    assert list(kernel_build.kernels_dir(tmp_path / "cache").iterdir()) == []


def test_no_compiler_is_an_error_the_engine_falls_back_on(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=r"no C\+\+ compiler"):
        kernel_build.ensure_built(tmp_path / "cache", compiler="no-such-c++-compiler")


@needs_cpu
def test_the_install_step_builds_into_the_cache(
    cache_with_library: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert kernel_build.main(["--cache-dir", str(cache_with_library)]) == 0
    assert str(kernel_build.library_path(cache_with_library)) in capsys.readouterr().out
    kernel_build.kernels_dir(cache_with_library).chmod(0o777)
    assert kernel_build.main(["--cache-dir", str(cache_with_library)]) == 0  # never fails an install
    assert "not built" in capsys.readouterr().out


def test_a_cpu_without_vnni_is_not_offered_the_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The integer decode paths need AVX512-VNNI: read from the CPU's flags, assumed where unreadable."""
    with_vnni, without = tmp_path / "with", tmp_path / "without"
    with_vnni.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512bw avx512_bf16 avx512_vnni\n")
    without.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512bw avx512_bf16\n")
    assert kernel_build.has_vnni(with_vnni) and not kernel_build.has_vnni(without)
    assert kernel_build.has_vnni(tmp_path / "missing")
    monkeypatch.setattr(kernel_build, "has_vnni", lambda: False)
    assert not kernel_build.cpu_supported()
