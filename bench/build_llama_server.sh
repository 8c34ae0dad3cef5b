#!/usr/bin/env bash
# Build llama.cpp's llama-server, the CPU peer of `make bench`, from the llama.cpp sources that the PyPI
# source distribution of llama-cpp-python vendors (PyPI is reachable where GitHub is not), with the tools
# that make the benchmarks' model files: llama-quantize and the HF -> GGUF converter (convert_hf_to_gguf.py
# with the gguf-py it ships), so both servers read one file made by llama.cpp's own tools.
#
#   bench/build_llama_server.sh        -> bench/.llama-server/bin/llama-server (cached; gitignored)
#                                         bench/.llama-server/bin/llama-quantize
#                                         bench/.llama-server/bin/llama-perplexity (for bench/perplexity.py)
#                                         bench/.llama-server/convert/convert_hf_to_gguf.py (+ gguf-py/)
#
# Release, native CPU flags (the same machine runs both servers), only the targets named above. About 20
# minutes on 2 cores; a second run finds the binaries and returns at once. BENCH_BUILD_JOBS sets make's -j.
# On a CPU with AMX, without AMX (-mno-amx-tile -mno-amx-int8 -mno-amx-bf16, which GCC keeps over
# -march=native): this llama.cpp's AMX code dies on such CPUs (SIGILL on tilezero, or a protection fault in
# its repack of K-quant files), so the peer runs its AVX-512 kernels; bench/.llama-server/VERSION says so.
# BENCH_LLAMA_ISA=avx2 builds without AVX-512 as well (-mno-avx512f, which GCC likewise keeps over
# -march=native) into bench/.llama-server-avx2: the peer of an AVX2-only CPU, on a CPU that has AVX-512,
# beside our own AVX2 path (cpu_isa: avx2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VERSION=0.3.36
STAMP="$VERSION+quantize+convert2+perplexity"
NO_AMX=""
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    STAMP="$STAMP+no-amx"
fi
DEST=$ROOT/bench/.llama-server
if [ "${BENCH_LLAMA_ISA:-native}" = avx2 ]; then
    NO_AMX="$NO_AMX -mno-avx512f"
    STAMP="$STAMP+avx2"
    DEST=$ROOT/bench/.llama-server-avx2
fi
BIN=$DEST/bin/llama-server
PY=${PYTHON:-$ROOT/.venv/bin/python}

if [ -x "$BIN" ] && [ "$(cat "$DEST/VERSION" 2>/dev/null)" = "$STAMP" ]; then
    echo "$BIN"
    exit 0
fi
for tool in cmake c++ make; do
    command -v "$tool" >/dev/null || { echo "building llama-server needs $tool" >&2; exit 1; }
done

WORK=$DEST/build
rm -rf "$WORK"
mkdir -p "$WORK"
"$PY" -m pip download --quiet --no-binary :all: --no-deps --dest "$WORK" "llama-cpp-python==$VERSION"
tar -xzf "$WORK"/llama_cpp_python-"$VERSION".tar.gz -C "$WORK"
SRC=$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp
[ -f "$SRC/CMakeLists.txt" ] || { echo "no vendored llama.cpp in the sdist at $SRC" >&2; exit 1; }

cmake -S "$SRC" -B "$WORK/cmake" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" >"$WORK/cmake.log"
cmake --build "$WORK/cmake" --target llama-server llama-quantize llama-perplexity \
    -j "${BENCH_BUILD_JOBS:-$(nproc)}" >"$WORK/build.log"

mkdir -p "$DEST/bin"
cp "$WORK/cmake/bin/llama-server" "$BIN"
cp "$WORK/cmake/bin/llama-quantize" "$DEST/bin/llama-quantize"
cp "$WORK/cmake/bin/llama-perplexity" "$DEST/bin/llama-perplexity"
rm -rf "$DEST/convert"
mkdir -p "$DEST/convert"
cp "$SRC/convert_hf_to_gguf.py" "$DEST/convert/"
cp -r "$SRC/conversion" "$DEST/convert/conversion"  # the converter's model classes
cp -r "$SRC/gguf-py" "$DEST/convert/gguf-py"
echo "$STAMP" >"$DEST/VERSION"
rm -rf "$WORK"
echo "$BIN"
