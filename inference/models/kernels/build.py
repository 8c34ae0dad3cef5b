"""Compile the native CPU kernels (csrc/) into the cache's kernels/: the AVX512 library (GGUF block
linears, AMX tile linears, the fused decode layers, prompt attention) on CPUs with AVX512-BF16, else the
AVX2 library (GGUF block linears, paged attention and the fused decode layers, in fp32) on CPUs with AVX2.

`make install` runs this module so a server never spends its first start compiling (about 15 s):

    python inference/models/kernels/build.py --cache-dir var/cache [--cxx c++]

The engine still compiles on first use where nothing was built beforehand (kernels/library.py). A
library's name carries a hash of every file it is built from, the flags and torch's version, so an edit or
an upgrade builds anew; the folder is private to this user and a library is loaded only if this user owns
it (cache_dir.py).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from inference.cache_dir import DEFAULT_CACHE_DIR, check_private, ensure_private_dir, private_temp_file

logger = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
_AVX512_FLAGS = (
    "-O3",
    "-fopenmp",
    "-mf16c",
    "-mfma",
    "-ffp-contract=off",  # FMAs only where the code asks for one: the kernels pin their rounding
    "-mavx512f",
    "-mavx512bw",
    "-mavx512vl",
    "-mavx512bf16",
    "-mavx512vnni",
    "-mavx512dq",
    "-mamx-tile",
    "-mamx-bf16",
    "-mamx-int8",
    "-DMOONCAKE_AVX512",  # common/ops.cpp: this library's op schemas
)
_AVX2_FLAGS = ("-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off", "-DMOONCAKE_AVX2")


@dataclass(frozen=True, slots=True)
class Library:
    """One shared library: csrc/<isa>/ and csrc/common/, compiled with `flags`. Its files are found by glob,
    so a new source or header is compiled and hashed into the library's name without a list to keep."""

    stem: str
    isa: str  # the folder under csrc/
    flags: tuple[str, ...]

    @property
    def folders(self) -> tuple[Path, ...]:
        return (CSRC / self.isa, CSRC / "common")

    @property
    def sources(self) -> tuple[Path, ...]:
        return tuple(sorted(path for folder in self.folders for path in folder.glob("*.cpp")))

    @property
    def inputs(self) -> tuple[Path, ...]:
        """Every file the library is built from: what its cache key hashes."""
        return tuple(sorted(path for folder in self.folders for path in folder.rglob("*") if path.is_file()))


AVX512_LIBRARY = Library("mooncake_avx512", "avx512", _AVX512_FLAGS)
AVX2_LIBRARY = Library("mooncake_avx2", "avx2", _AVX2_FLAGS)
LIBRARIES = (AVX512_LIBRARY, AVX2_LIBRARY)


def kernels_dir(cache_dir: Path) -> Path:
    return cache_dir / "kernels"


def library_path(cache_dir: Path, library: Library = AVX512_LIBRARY) -> Path:
    """Where the library for this source, these flags and this torch lives."""
    code = b"".join(path.name.encode() + path.read_bytes() for path in library.inputs)
    key = hashlib.sha256(code + " ".join(library.flags).encode() + torch.__version__.encode())
    return kernels_dir(cache_dir) / f"{library.stem}-{key.hexdigest()[:16]}.so"


def cpu_supported() -> bool:
    """Whether this CPU runs the kernel (AVX512-BF16 and AVX512-VNNI; AMX is optional)."""
    try:
        bf16 = bool(torch.cpu._is_avx512_bf16_supported()) and torch.backends.cpu.get_cpu_capability() in (
            "AVX512",
            "AMX",
        )
    except AttributeError:
        return False
    return bf16 and has_vnni()


def has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """AVX512-VNNI (the integer decode paths'), as Linux lists it; every AVX512-BF16 CPU so far has it, so
    where the flags cannot be read that is assumed."""
    try:
        flags = cpuinfo.read_text()
    except OSError:
        return True
    return "avx512_vnni" in flags or "flags" not in flags


def avx2_supported() -> bool:
    """Whether this CPU runs AVX2_LIBRARY's kernels (AVX2, FMA and F16C; every x86-64 CPU since 2013)."""
    try:
        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512", "AMX")
    except AttributeError:
        return False


def ensure_built(cache_dir: Path, *, compiler: str = "c++", library: Library = AVX512_LIBRARY) -> Path:
    """The checked library, compiled first if missing; OSError (UnsafeCacheError among them) if it cannot
    be built here or must not be trusted."""
    ensure_private_dir(cache_dir)
    ensure_private_dir(kernels_dir(cache_dir))
    path = library_path(cache_dir, library)
    if not path.exists():
        _compile(path, compiler, library)
    check_private(path)
    return path


def _compile(path: Path, compiler: str, library: Library = AVX512_LIBRARY) -> None:
    from torch.utils import cpp_extension

    executable = shutil.which(compiler)
    if executable is None:
        raise OSError(f"no C++ compiler ({compiler}) on PATH")
    torch_lib = Path(torch.__file__).parent / "lib"
    compile_flags = [
        *library.flags,
        "-fPIC",
        "-std=c++17",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *(f"-I{path}" for path in cpp_extension.include_paths()),
    ]
    started = time.monotonic()
    build = Path(tempfile.mkdtemp(prefix=f".{library.stem}-build-", dir=path.parent))
    partial = private_temp_file(path.parent, prefix=f".{library.stem}-", suffix=".so.tmp")
    try:
        objects = [build / f"{source.stem}.o" for source in library.sources]
        # One compiler per source, as many at once as there are cores: each source parses all of ATen's
        # headers, so a single serial invocation took about 50 s of an install here.
        with ThreadPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)))) as pool:
            commands = [
                [executable, *compile_flags, "-c", str(source), "-o", str(obj)]
                for source, obj in zip(library.sources, objects, strict=True)
            ]
            for result in pool.map(_run, commands):
                if result.returncode != 0:
                    raise OSError(f"compiling csrc/{library.isa}/ failed: {result.stderr.strip()[-500:]}")
        link = [
            executable,
            *library.flags,
            "-shared",
            *(str(obj) for obj in objects),
            "-o",
            str(partial),
            f"-L{torch_lib}",
            f"-Wl,-rpath,{torch_lib}",
            "-lc10",
            "-ltorch_cpu",
        ]
        result = _run(link)
        if result.returncode != 0:
            raise OSError(f"linking csrc/{library.isa}/ failed: {result.stderr.strip()[-500:]}")
        # The linker may recreate the output with the umask's mode: settle it before it is trusted.
        os.chmod(partial, 0o700)
        partial.replace(path)  # atomic: concurrent builds (test workers, servers) never see half a file
    finally:
        partial.unlink(missing_ok=True)
        shutil.rmtree(build, ignore_errors=True)
    logger.info("Compiled the %s kernels in %.1fs into %s", library.stem, time.monotonic() - started, path)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the native CPU kernels into the model cache.")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--cxx", default="c++", help="the C++ compiler (default: c++)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    library = AVX512_LIBRARY
    if not cpu_supported():
        if not avx2_supported():
            print("Native kernels: this CPU lacks AVX2; not building them (GGUFs load dequantized)")
            return 0
        print("Native kernels: this CPU lacks AVX512-BF16; building the fp32 AVX2 block kernels only")
        library = AVX2_LIBRARY
    try:
        path = ensure_built(args.cache_dir, compiler=args.cxx, library=library)
    except OSError as exc:
        # Never fails an install: the engine falls back to the dense bf16 weights (or compiles on first use).
        print(f"Native kernels not built ({exc}); the engine will fall back at run time")
        return 0
    print(f"Native kernels: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
