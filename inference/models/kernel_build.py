"""Compile the native CPU kernels (csrc/: q4_linear, kquant_linear, the fused decode_layers,
prompt_attention) into the cache's kernels/; on CPUs with AVX2 but not AVX512-BF16, only the fp32 block
kernels of csrc/avx2_blocks.cpp (AVX2_LIBRARY).

`make install` runs this module so a server never spends its first start compiling (about 15 s):

    python -m inference.models.kernel_build --cache-dir var/cache [--cxx c++]

The engine still compiles on first use where nothing was built beforehand (q4_decode.load_kernel). The
library's name carries a hash of the source, the flags and torch's version, so an upgrade builds anew;
the folder is private to this user and a library is loaded only if this user owns it (cache_dir.py).
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
SOURCES = [
    CSRC / "q4_decode.cpp",
    CSRC / "decode_layers.cpp",
    CSRC / "prompt_attention.cpp",
    CSRC / "tile_linear.cpp",
    CSRC / "kquant_linear.cpp",
]
HEADERS = [
    CSRC / "q4_kernels.h",
    CSRC / "block_gemm.h",
    CSRC / "kquant_formats.h",
    CSRC / "kquant_levels.h",
    CSRC / "kquant_four_rows.h",
    CSRC / "kquant_int8.h",
    CSRC / "kquant_int16.h",
    CSRC / "kquant_tiles.h",
    CSRC / "kquant_integer.h",
    CSRC / "kquant_tile_activations.h",
    CSRC / "bf16_lanes.h",
    CSRC / "transpose16.h",
    CSRC / "amx_tiles.h",
]
_FLAGS = [
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
]


@dataclass(frozen=True, slots=True)
class Library:
    """One shared library: its name's stem, what it is compiled from and with."""

    stem: str
    sources: tuple[Path, ...]
    headers: tuple[Path, ...]
    flags: tuple[str, ...]


AVX512_LIBRARY = Library("q4_decode", tuple(SOURCES), tuple(HEADERS), tuple(_FLAGS))
AVX2_LIBRARY = Library(
    "avx2_blocks",
    (CSRC / "avx2_blocks.cpp",),
    (CSRC / "avx2_common.h", CSRC / "avx2_kquants.h"),
    ("-O3", "-fopenmp", "-mavx2", "-mfma", "-mf16c", "-ffp-contract=off"),
)


def kernels_dir(cache_dir: Path) -> Path:
    return cache_dir / "kernels"


def library_path(cache_dir: Path, library: Library = AVX512_LIBRARY) -> Path:
    """Where the library for this source, these flags and this torch lives."""
    code = b"".join(path.read_bytes() for path in [*library.sources, *library.headers])
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
                    raise OSError(f"compiling {CSRC.name}/ failed: {result.stderr.strip()[-500:]}")
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
            raise OSError(f"linking {CSRC.name}/ failed: {result.stderr.strip()[-500:]}")
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
    parser = argparse.ArgumentParser(description="Build the Q4 decode kernel into the model cache.")
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
        print(f"Q4 decode kernel not built ({exc}); the engine will fall back at run time")
        return 0
    print(f"Native kernels: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
