#!/usr/bin/env bash
# Mooncake vs `transformers serve --continuous-batching` on the same model and CPU, one after the other.
# The peer runs float32 as issue 4 pins it; ours runs its default dtype ("auto": bf16 on CPUs with AMX or
# AVX512-BF16, else float32); BENCH_OURS_DTYPE=float32 gives the like-for-like fp32 comparison.
#
#   bench/compare.sh            (or: make bench)
#
# Loads (bench/serve.py, streaming chat, greedy):
#   (a) 32 requests, concurrency 16, max_tokens 128
#   (b)  4 requests, concurrency 1,  max_tokens 64
#   (c) 64 requests, a shared 400-token system prompt, concurrency 16, max_tokens 32
# Prints a table of each figure with the ratio ours/peer and each server's peak RSS (VmHWM).
# Results land in bench/results/<timestamp>/ (gitignored). Both servers listen on 127.0.0.1 only.
#
# Each load stops at its time limit (a: 150 s, b: 60 s, c: 150 s; BENCH_TIME_SCALE=2 doubles them) so the
# whole run stays within ~15 minutes even on a busy machine; requests still streaming then are counted as
# "cut" and their tokens so far still count toward throughput (the table says how many were cut).
#
# Environment knobs: BENCH_KV_BYTES (KV cache of each server, default 768 MiB), BENCH_ONLY=ours|peer,
# BENCH_LOADS="a b c", BENCH_TIME_SCALE (default 1), PYTHON (the project's venv python),
# BENCH_SMOKE=1 (each load cut to 2 requests of 4 tokens: checks the plumbing, measures nothing),
# BENCH_THREADS=N (intra-op threads of BOTH servers: MOONCAKE_CPU_THREADS for ours, OMP_NUM_THREADS for
# both; unset = each uses every core, which is the fair default on an otherwise idle machine),
# BENCH_OURS_DTYPE (our server's dtype, default auto = what `make run` serves; float32 = the peer's dtype),
# BENCH_OURS_QUANT (our server's quantization, default none; gguf keeps the GGUF's Q4_1 linears 4-bit),
# BENCH_PYSPY=1 (py-spy, installed into the peer venv, samples our server at 20 Hz during load (a):
# ours-a.pyspy.txt and its summary ours-a.pyspy-summary.txt; external sampling, about 1% of a core).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PY=${PYTHON:-$ROOT/.venv/bin/python}
PEER_VENV=$ROOT/bench/.peer-venv
TORCH_CPU="torch==2.13.0"
KV_BYTES=${BENCH_KV_BYTES:-805306368}
LOADS=${BENCH_LOADS:-a b c}
TIME_SCALE=${BENCH_TIME_SCALE:-1}
OUT=${BENCH_OUT:-$ROOT/bench/results/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
export MOONCAKE_CACHE_DIR=${MOONCAKE_CACHE_DIR:-$ROOT/var/cache}
if [ -n "${BENCH_THREADS:-}" ]; then
    export MOONCAKE_CPU_THREADS=$BENCH_THREADS OMP_NUM_THREADS=$BENCH_THREADS
fi

log() { printf '[bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Peak RSS (VmHWM, KiB) of a process plus its descendants, read while they still run.
peak_rss_kib() {
    local pid=$1 total=0 hwm child
    hwm=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    total=$((total + ${hwm:-0}))
    for child in $(pgrep -P "$pid" 2>/dev/null || true); do
        total=$((total + $(peak_rss_kib "$child")))
    done
    echo "$total"
}

wait_http() {  # url pid log timeout
    local url=$1 pid=$2 logfile=$3 deadline=$((SECONDS + $4))
    while ((SECONDS < deadline)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            log "server exited early; last lines of $logfile:"
            tail -n 30 "$logfile" >&2
            return 1
        fi
        if curl -fsS -m 5 "$url" >/dev/null 2>&1; then
            return 0
        fi
        sleep 1
    done
    log "no answer from $url within $4 s"
    return 1
}

stop_server() {  # pid
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    kill -KILL "$pid" 2>/dev/null || true
}

SERVER_PID=""
cleanup() { if [ -n "$SERVER_PID" ]; then stop_server "$SERVER_PID"; fi; }
trap cleanup EXIT

# ---- the peer's venv (own venv, CPU torch first so pip never pulls a CUDA build) ----------------------
ensure_peer_venv() {
    if [ -x "$PEER_VENV/bin/transformers" ]; then
        return 0
    fi
    log "creating $PEER_VENV (CPU torch, then transformers[serving])"
    python3 -m venv "$PEER_VENV"
    "$PEER_VENV/bin/pip" install -q "$TORCH_CPU"
    "$PEER_VENV/bin/pip" install -q "transformers[serving]"
}

# ---- the model: the engine's GGUF -> safetensors cache directory of the default model -----------------
MODEL_DIR=$("$PY" - <<'EOF'
import os
from pathlib import Path

from inference.gguf_convert import ensure_converted
from inference.loader import resolve_source

# The server's cache folder, as webapp/settings resolves it (the engine itself reads no environment).
cache = os.environ.get("MOONCAKE_CACHE_DIR") or Path(os.environ.get("MOONCAKE_DATA") or "var") / "cache"
print(ensure_converted(resolve_source("default"), Path(cache)).resolve())
EOF
)
grep -q LlamaForCausalLM "$MODEL_DIR/config.json" || { log "$MODEL_DIR/config.json is not a LlamaForCausalLM"; exit 1; }
log "model directory: $MODEL_DIR"
log "load before the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc --all) cores; threads: ${BENCH_THREADS:-all cores}"
echo "intra-op threads: ${BENCH_THREADS:-all cores} of $(nproc --all)" >"$OUT/setup.txt"

run_loads() {  # name base_url
    local name=$1 url=$2 load
    local common=(--base-url "$url" --tokenizer "$MODEL_DIR" --count-tokens tokenizer --temperature 0)
    for load in $LOADS; do
        local args=() limit
        case $load in
            a) limit=150; args=(--dataset fixed --num-prompts 32 --max-concurrency 16 --max-tokens 128) ;;
            b) limit=60; args=(--dataset fixed --num-prompts 4 --max-concurrency 1 --max-tokens 64) ;;
            c) limit=150; args=(--dataset shared-prefix --shared-prefix-len 400 --num-prompts 64
                --max-concurrency 16 --max-tokens 32) ;;
            *) log "unknown load $load"; return 1 ;;
        esac
        limit=$(awk -v l="$limit" -v s="$TIME_SCALE" 'BEGIN {printf "%d", l * s}')
        args+=(--time-limit "$limit" --timeout "$((limit + 60))")
        if [ -n "${BENCH_SMOKE:-}" ]; then
            args+=(--num-prompts 2 --max-tokens 4)
        fi
        log "$name: load ($load)"
        local spy=""
        if [ "$name" = ours ] && [ "$load" = a ] && [ -n "${BENCH_PYSPY:-}" ]; then
            "$PEER_VENV/bin/pip" install -q py-spy >/dev/null 2>&1 || true
            if [ -x "$PEER_VENV/bin/py-spy" ]; then
                "$PEER_VENV/bin/py-spy" record --pid "$SERVER_PID" --rate 20 --threads --nonblocking \
                    --duration "$limit" --format raw -o "$OUT/ours-a.pyspy.txt" >"$OUT/py-spy.log" 2>&1 &
                spy=$!
            fi
        fi
        timeout "$((limit + 300))" "$PY" -m bench.serve "${common[@]}" "${args[@]}" --label "$name-$load" \
            --json "$OUT/$name-$load.json" || log "$name: load ($load) failed or timed out"
        if [ -n "$spy" ]; then
            kill -INT "$spy" 2>/dev/null || true
            wait "$spy" 2>/dev/null || true
            "$PY" -m bench.pyspy_summary "$OUT/ours-a.pyspy.txt" >"$OUT/ours-a.pyspy-summary.txt" 2>&1 || true
        fi
    done
}

# ---- ours: Daphne with the test settings, as tests/conftest.py's daphne_server -----------------------
# This VM's memory bandwidth moves with its neighbours, and bf16 decode is bound by it: note it per side.
note_bandwidth() {  # name
    "$PY" - "$1" >>"$OUT/setup.txt" <<'EOF' || true
import sys, time, torch
torch.set_num_threads(1)
src = torch.ones(128 << 20); dst = torch.empty_like(src); dst.copy_(src)
started = time.perf_counter()
for _ in range(5):
    dst.copy_(src)
gbs = 5 * 2 * src.numel() * 4 / (time.perf_counter() - started) / 1e9
print(f"{sys.argv[1]}: memory bandwidth just before, copy_ of 512 MiB on 1 thread: {gbs:.1f} GB/s")
EOF
}

run_ours() {
    note_bandwidth ours
    local data port
    data=$(mktemp -d -t mooncake-bench-XXXXXX)
    port=$(free_port)
    cat >"$data/mooncake.yaml" <<EOF
model:
  model_id: default
  dtype: ${BENCH_OURS_DTYPE:-auto}
  quantization: ${BENCH_OURS_QUANT:-none}
engine:
  kv_cache_memory_bytes: $KV_BYTES
EOF
    local env=(DJANGO_SETTINGS_MODULE=webapp.settings.test MOONCAKE_DATA="$data" MOONCAKE_AUTOLOAD=1
        MOONCAKE_API_AUTH=off MOONCAKE_CONFIG="$data/mooncake.yaml" PYTHONUNBUFFERED=1)
    env "${env[@]}" "$PY" manage.py migrate --noinput >"$data/migrate.log" 2>&1
    log "ours: starting on 127.0.0.1:$port (log $OUT/ours-server.log)"
    env "${env[@]}" "$PY" -m webapp.core.server --host 127.0.0.1 --port "$port" >"$OUT/ours-server.log" 2>&1 &
    SERVER_PID=$!
    wait_http "http://127.0.0.1:$port/health" "$SERVER_PID" "$OUT/ours-server.log" 600
    grep -o 'torch\.[a-z0-9]* on cpu' "$OUT/ours-server.log" | head -n 1 | sed 's/^/ours: /' >>"$OUT/setup.txt" || true
    run_loads ours "http://127.0.0.1:$port"
    peak_rss_kib "$SERVER_PID" >"$OUT/ours-rss.txt"
    stop_server "$SERVER_PID"
    SERVER_PID=""
    rm -rf "$data"
}

# ---- the peer: transformers serve, continuous batching, CPU, float32 ----------------------------------
run_peer() {
    ensure_peer_venv
    note_bandwidth peer
    local port block=32
    port=$(free_port)
    # Its KV cache would otherwise be sized from free RAM (it took ~10 GB here and was OOM-killed):
    # give it the same budget as ours. Bytes per token: layers * 2 (K, V) * kv_heads * head_dim * 4.
    local blocks
    blocks=$("$PY" - "$MODEL_DIR" "$KV_BYTES" "$block" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
per_token = c["num_hidden_layers"] * 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim * 4
print(max(16, int(sys.argv[2]) // (per_token * int(sys.argv[3]))))
EOF
)
    log "peer: $("$PEER_VENV/bin/python" -c 'import transformers; print("transformers", transformers.__version__)'),"\
" $blocks blocks of $block tokens, on 127.0.0.1:$port (log $OUT/peer-server.log)"
    "$PEER_VENV/bin/transformers" serve --continuous-batching --device cpu --dtype float32 \
        --cb-block-size "$block" --cb-num-blocks "$blocks" --cb-max-batch-tokens 4096 \
        --host 127.0.0.1 --port "$port" "$MODEL_DIR" >"$OUT/peer-server.log" 2>&1 &
    SERVER_PID=$!
    wait_http "http://127.0.0.1:$port/health" "$SERVER_PID" "$OUT/peer-server.log" 600
    echo "peer: torch.float32 on cpu" >>"$OUT/setup.txt"
    run_loads peer "http://127.0.0.1:$port"
    peak_rss_kib "$SERVER_PID" >"$OUT/peer-rss.txt"
    stop_server "$SERVER_PID"
    SERVER_PID=""
}

case ${BENCH_ONLY:-both} in
    ours) run_ours ;;
    peer) run_peer ;;
    *) run_ours; run_peer ;;
esac

log "load after the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc --all) cores"
"$PY" -m bench.table "$OUT"
log "results in $OUT"
