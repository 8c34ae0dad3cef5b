#!/usr/bin/env bash
# Mooncake against two peers on the same model and CPU, one server after the other:
#   llama-server (llama.cpp, built by bench/build_llama_server.sh) serving the default model's GGUF itself,
#   `transformers serve --continuous-batching` (its own venv, float32 as issue 4 pins it) on its safetensors.
# Ours runs its default dtype ("auto": bf16 on CPUs with AMX or AVX512-BF16, else float32);
# BENCH_OURS_DTYPE=float32 gives the like-for-like fp32 comparison with transformers, BENCH_OURS_QUANT=gguf
# keeps the GGUF's Q4_1 linears 4-bit as llama-server does.
#
#   bench/compare.sh            (or: make bench; make bench BENCH_PEERS=llama skips transformers)
#
# Loads (bench/serve.py, streaming chat, greedy):
#   (a) 32 requests, concurrency 16, max_tokens 128
#   (b)  4 requests, concurrency 1,  max_tokens 64
#   (c) 64 requests, a shared 400-token system prompt, concurrency 16, max_tokens 32
#   (d) 64 requests of (a)'s prompts, Poisson arrivals at BENCH_D_LOAD (0.8) x the server's own (a) request
#       throughput, no concurrency cap: the tail (TTFT and ITL p99) near each server's capacity
#   (p)  4 distinct 1,000-token prompts, concurrency 1, max_tokens 1: prompt tokens per second to the first
#       token (not in the default BENCH_LOADS; issue 30's prefill figure for the shaped models)
#   (e) 16 edit-a-given-text requests (fix the typos / rename a variable, the answer repeats the prompt),
#       concurrency 4, max_tokens 256, against ours and llama-server twice: speculation off, then a second
#       start with n-gram speculation (BENCH_SPEC, BENCH_LLAMA_SPEC); acceptance rate from GET /metrics
# Every server gets the same cores and intra-op threads (BENCH_THREADS, default all cores), pinned with
# taskset to the same CPUs. Prints tables of each figure with the ratios ours/peer, the targets met or
# missed, load (e) with speculation off and on, and each server's peak RSS (VmHWM).
# Results land in bench/results/<timestamp>/ (gitignored). Every server listens on 127.0.0.1 only.
#
# Each load stops at its time limit (a: 150 s, b: 60 s, c: 150 s, d: its arrivals + 90 s, e: 240 s;
# BENCH_TIME_SCALE=2 doubles them); requests still streaming then are counted as "cut" and their tokens so
# far still count toward throughput (the table says how many were cut).
#
# Environment knobs: BENCH_PEERS (default "llama transformers"), BENCH_ONLY=ours|peers,
# BENCH_LOADS (default "a b c d e"), BENCH_TIME_SCALE (default 1), PYTHON (the project's venv python),
# BENCH_SMOKE=1 (each load cut to 2 requests of 4 tokens: checks the plumbing, measures nothing),
# BENCH_THREADS=N (intra-op threads of EVERY server: MOONCAKE_CPU_THREADS for ours, -t/-tb for
# llama-server, OMP_NUM_THREADS for all; default: every core), BENCH_PIN=0 (no taskset),
# BENCH_KV_BYTES (KV cache of ours and transformers, default 768 MiB), BENCH_LLAMA_CTX (llama-server's
# context per slot, default 2048; 16 slots), BENCH_LLAMA_ARGS (more llama-server flags),
# BENCH_D_LOAD (default 0.8) or BENCH_D_RATE (one rate in req/s for every server),
# BENCH_SPEC (ours' `speculative:` settings for (e); empty skips the run), BENCH_LLAMA_SPEC (llama-server's
# speculation flags for (e); empty skips the run),
# BENCH_OURS_DTYPE (our server's dtype, default auto = what `make run` serves; float32 = the peer's dtype),
# BENCH_OURS_QUANT (our server's quantization, default none; gguf keeps the GGUF's Q4_1 linears 4-bit),
# BENCH_GGUF=FILE (serve this GGUF instead of the bundled model, ours and llama-server both: e.g. a file of
# bench/shaped_models.py; ours then shares the checkout's var/cache, so its conversion is made once),
# BENCH_LLAMA_ISA=avx2 with MOONCAKE_CPU_ISA=avx2 and BENCH_OURS_DTYPE=float32: both servers as on a CPU
# without AVX-512 (llama-server built without it, bench/build_llama_server.sh),
# BENCH_PYSPY=1 (py-spy, installed into the peer venv, samples our server at 20 Hz during load (a):
# ours-a.pyspy.txt and its summary ours-a.pyspy-summary.txt; external sampling, about 1% of a core).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PY=${PYTHON:-$ROOT/.venv/bin/python}
PEER_VENV=$ROOT/bench/.peer-venv
TORCH_CPU="torch==2.13.0"
KV_BYTES=${BENCH_KV_BYTES:-805306368}
LOADS=${BENCH_LOADS:-a b c d e}
PEERS=${BENCH_PEERS:-llama transformers}
TIME_SCALE=${BENCH_TIME_SCALE:-1}
THREADS=${BENCH_THREADS:-$(nproc)}
LLAMA_SLOTS=16
LLAMA_CTX=${BENCH_LLAMA_CTX:-2048}
SPEC=${BENCH_SPEC-method: ngram, num_speculative_tokens: 4, prompt_lookup_max: 3}
LLAMA_SPEC=${BENCH_LLAMA_SPEC---spec-type ngram-simple --spec-ngram-simple-size-n 3 --spec-ngram-simple-size-m 4}
D_LOAD=${BENCH_D_LOAD:-0.8}
OUT=${BENCH_OUT:-$ROOT/bench/results/$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
export MOONCAKE_CACHE_DIR=${MOONCAKE_CACHE_DIR:-$ROOT/var/cache}
export MOONCAKE_CPU_THREADS=$THREADS OMP_NUM_THREADS=$THREADS

log() { printf '[bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

has_load() { [[ " $LOADS " == *" $1 "* ]]; }

# The first $THREADS CPUs this process may run on: every server is pinned to the same ones.
CPUS=$("$PY" -c 'import os, sys; print(",".join(map(str, sorted(os.sched_getaffinity(0))[: int(sys.argv[1])])))' "$THREADS")
PIN=()
if [ "${BENCH_PIN:-1}" != 0 ] && command -v taskset >/dev/null; then
    PIN=(taskset -c "$CPUS")
fi

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
OURS_DATA=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then stop_server "$SERVER_PID"; fi
    if [ -n "$OURS_DATA" ]; then rm -rf "$OURS_DATA"; fi
}
trap cleanup EXIT

# Records the server's peak RSS and stops it.
finish_server() {  # name
    peak_rss_kib "$SERVER_PID" >"$OUT/$1-rss.txt"
    stop_server "$SERVER_PID"
    SERVER_PID=""
}

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

# ---- the model: the engine's GGUF (llama-server serves it) -> safetensors directory (tokenizer, peer) -
MODEL_INFO=$("$PY" - <<'EOF'
import os
from pathlib import Path

from inference.models.gguf.convert import ensure_converted
from inference.models.loader.load import resolve_source

# The server's cache folder, as webapp/settings resolves it (the engine itself reads no environment).
cache = os.environ.get("MOONCAKE_CACHE_DIR") or Path(os.environ.get("MOONCAKE_DATA") or "var") / "cache"
source = Path(os.environ["BENCH_GGUF"]).resolve() if os.environ.get("BENCH_GGUF") else resolve_source("default")
print(ensure_converted(source, Path(cache)).resolve())
print(source.resolve())
EOF
)
MODEL_DIR=$(sed -n 1p <<<"$MODEL_INFO")
GGUF=$(sed -n 2p <<<"$MODEL_INFO")
if [ -z "${BENCH_GGUF:-}" ]; then
    grep -q LlamaForCausalLM "$MODEL_DIR/config.json" || { log "$MODEL_DIR/config.json is not a LlamaForCausalLM"; exit 1; }
fi
log "model directory: $MODEL_DIR; GGUF: $GGUF"
log "load before the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc --all) cores"
log "every server: $THREADS intra-op thread(s)${PIN:+, pinned to CPUs $CPUS}; peers: $PEERS; loads: $LOADS"
echo "every server: $THREADS intra-op thread(s) of $(nproc --all) cores${PIN:+, pinned with taskset -c $CPUS}" \
    >"$OUT/setup.txt"

# Request rate of load (d) for a server: BENCH_D_RATE, else BENCH_D_LOAD x its own (a) request throughput.
d_rate() {  # name
    if [ -n "${BENCH_D_RATE:-}" ]; then
        echo "$BENCH_D_RATE"
        return 0
    fi
    "$PY" - "$OUT/$1-a.json" "$D_LOAD" <<'EOF'
import json, sys
from pathlib import Path

path = Path(sys.argv[1])
rate = json.loads(path.read_text())["request_throughput"] * float(sys.argv[2]) if path.exists() else 0.0
if rate <= 0:
    sys.exit(1)
print(f"{rate:.4f}")
EOF
}

run_loads() {  # name base_url loads
    local name=$1 url=$2 loads=$3 load
    local common=(--base-url "$url" --tokenizer "$MODEL_DIR" --count-tokens tokenizer --temperature 0)
    for load in $loads; do
        local args=() limit rate=""
        case $load in
            a) limit=150; args=(--dataset fixed --num-prompts 32 --max-concurrency 16 --max-tokens 128) ;;
            b) limit=60; args=(--dataset fixed --num-prompts 4 --max-concurrency 1 --max-tokens 64) ;;
            c) limit=150; args=(--dataset shared-prefix --shared-prefix-len 400 --num-prompts 64
                --max-concurrency 16 --max-tokens 32) ;;
            d) if ! rate=$(d_rate "$name"); then
                    log "$name: no request throughput from load (a) for (d)'s rate (set BENCH_D_RATE); skipping (d)"
                    continue
                fi
                # After the scaling below: the arrivals (at most 810 s) + 90 s x BENCH_TIME_SCALE.
                limit=$(awk -v r="$rate" -v s="$TIME_SCALE" 'BEGIN {printf "%d", (64 / r > 810 ? 810 : 64 / r) / s + 90}')
                args=(--dataset fixed --num-prompts 64 --max-tokens 128 --request-rate "$rate") ;;
            e) limit=240; args=(--dataset edit --num-prompts 16 --max-concurrency 4 --max-tokens 256 --spec-metrics) ;;
            p) limit=300; args=(--dataset random --random-input-len 1000 --random-range-ratio 0 --num-prompts 4
                --max-concurrency 1 --max-tokens 1) ;;
            *) log "unknown load $load"; return 1 ;;
        esac
        limit=$(awk -v l="$limit" -v s="$TIME_SCALE" 'BEGIN {printf "%d", l * s}')
        args+=(--time-limit "$limit" --timeout "$((limit + 60))")
        if [ -n "${BENCH_SMOKE:-}" ]; then
            args+=(--num-prompts 2 --max-tokens 4)
        fi
        log "$name: load ($load)${rate:+ at $rate req/s (Poisson arrivals)}"
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

# The loads without (e), which only ours and llama-server get (each twice: speculation off, then on).
loads_without_e() { local l out=""; for l in $LOADS; do [ "$l" = e ] || out+="$l "; done; echo "$out"; }

# This VM's memory bandwidth moves with its neighbours, and decode is bound by it: note it per server.
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
    [ -n "${BENCH_GGUF:-}" ] || return 0
    # The one-stream bound: the weights one token reads (the file less the embedding, of which a token reads
    # one row) over that copy rate (read and written bytes both counted, as the copy moves them).
    local rate
    rate=$(tail -n 1 "$OUT/setup.txt" | awk '{print $(NF-1)}')
    "$PY" - "$1" "$GGUF" "$rate" >>"$OUT/setup.txt" <<'EOF' || true
import sys
from gguf import GGUFReader
weights = sum(int(t.n_bytes) for t in GGUFReader(sys.argv[2]).tensors if t.name != "token_embd.weight")
rate = float(sys.argv[3])
print(f"{sys.argv[1]}: physical limit for one stream: {rate:.1f} GB/s over {weights / 1e9:.2f} GB of weights"
      f" per token = {rate * 1e9 / weights:.1f} tok/s")
EOF
}

# ---- ours: Daphne with the test settings, as tests/conftest.py's daphne_server -----------------------
PORT=""
start_ours() {  # name [speculative settings]
    local name=$1 spec=${2:-}
    OURS_DATA=$(mktemp -d -t mooncake-bench-XXXXXX)
    PORT=$(free_port)
    {
        echo "model:"
        if [ -n "${BENCH_GGUF:-}" ]; then echo "  model_id: $GGUF"; else echo "  model_id: default"; fi
        echo "  dtype: ${BENCH_OURS_DTYPE:-auto}"
        echo "  quantization: ${BENCH_OURS_QUANT:-none}"
        if [ -n "$spec" ]; then echo "  speculative: {$spec}"; fi
        echo "engine:"
        echo "  kv_cache_memory_bytes: $KV_BYTES"
    } >"$OURS_DATA/mooncake.yaml"
    cp "$OURS_DATA/mooncake.yaml" "$OUT/$name-mooncake.yaml"
    local env=(DJANGO_SETTINGS_MODULE=webapp.settings.test MOONCAKE_DATA="$OURS_DATA" MOONCAKE_AUTOLOAD=1
        MOONCAKE_API_AUTH=off MOONCAKE_CONFIG="$OURS_DATA/mooncake.yaml" PYTHONUNBUFFERED=1)
    if [ -n "${BENCH_GGUF:-}" ]; then
        env+=(MOONCAKE_CACHE_DIR="$ROOT/var/cache" MOONCAKE_MODEL_ROOTS="$(dirname "$GGUF")")
    fi
    env "${env[@]}" "$PY" manage.py migrate --noinput >"$OURS_DATA/migrate.log" 2>&1 || return 1
    log "$name: starting on 127.0.0.1:$PORT (log $OUT/$name-server.log)"
    env "${env[@]}" "${PIN[@]}" "$PY" -m webapp.serving.server --host 127.0.0.1 --port "$PORT" \
        >"$OUT/$name-server.log" 2>&1 &
    SERVER_PID=$!
    wait_http "http://127.0.0.1:$PORT/health" "$SERVER_PID" "$OUT/$name-server.log" 600
}

stop_ours() {  # name
    finish_server "$1"
    rm -rf "$OURS_DATA"
    OURS_DATA=""
}

run_ours() {
    note_bandwidth ours
    start_ours ours || { log "ours did not start"; exit 1; }
    grep -o 'torch\.[a-z0-9]* on cpu' "$OUT/ours-server.log" | head -n 1 | sed 's/^/ours: /' >>"$OUT/setup.txt" || true
    run_loads ours "http://127.0.0.1:$PORT" "$LOADS"
    stop_ours ours
    if has_load e && [ -n "$SPEC" ]; then
        echo "ours, speculation on: speculative: {$SPEC}" >>"$OUT/setup.txt"
        if start_ours ours-spec "$SPEC"; then
            run_loads ours-spec "http://127.0.0.1:$PORT" e
            stop_ours ours-spec
        else
            log "ours with speculative: {$SPEC} did not start; (e) with speculation skipped"
            stop_server "$SERVER_PID"
            SERVER_PID=""
            rm -rf "$OURS_DATA"
            OURS_DATA=""
        fi
    fi
}

# ---- llama-server: the same GGUF, 16 slots, the same threads ------------------------------------------
LLAMA_BIN=""
start_llama() {  # name [more flags]
    local name=$1
    shift
    PORT=$(free_port)
    local flags=(-m "$GGUF" -np "$LLAMA_SLOTS" -c "$((LLAMA_SLOTS * LLAMA_CTX))" -t "$THREADS" -tb "$THREADS"
        --jinja --metrics --host 127.0.0.1 --port "$PORT")
    # shellcheck disable=SC2206  # BENCH_LLAMA_ARGS and the speculation flags are word-split on purpose
    flags+=(${BENCH_LLAMA_ARGS:-} "$@")
    log "$name: starting on 127.0.0.1:$PORT (log $OUT/$name-server.log)"
    echo "$LLAMA_BIN ${flags[*]}" >"$OUT/$name-command.txt"
    "${PIN[@]}" "$LLAMA_BIN" "${flags[@]}" >"$OUT/$name-server.log" 2>&1 &
    SERVER_PID=$!
    wait_http "http://127.0.0.1:$PORT/health" "$SERVER_PID" "$OUT/$name-server.log" 300
}

run_llama() {
    LLAMA_BIN=$(bench/build_llama_server.sh | tail -n 1)
    note_bandwidth llama-server
    local kv
    kv=$("$PY" - "$MODEL_DIR" "$((LLAMA_SLOTS * LLAMA_CTX))" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1] + "/config.json"))
head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
per_token = c["num_hidden_layers"] * 2 * c.get("num_key_value_heads", c["num_attention_heads"]) * head_dim * 2
print(f"{per_token * int(sys.argv[2]) / 2**20:.0f} MiB")
EOF
)
    echo "llama-server: $("$LLAMA_BIN" --version 2>&1 | grep -m 1 version) (build $(cat "$(dirname "$LLAMA_BIN")/../VERSION")), $(basename "$GGUF")," \
        "$LLAMA_SLOTS slots x $LLAMA_CTX tokens, f16 KV cache ($kv), -t $THREADS -tb $THREADS${BENCH_LLAMA_ARGS:+ $BENCH_LLAMA_ARGS}" \
        >>"$OUT/setup.txt"
    start_llama llama || { log "llama-server did not start"; exit 1; }
    run_loads llama "http://127.0.0.1:$PORT" "$LOADS"
    finish_server llama
    if has_load e && [ -n "$LLAMA_SPEC" ]; then
        echo "llama-server, speculation on: $LLAMA_SPEC" >>"$OUT/setup.txt"
        # shellcheck disable=SC2086
        if start_llama llama-spec $LLAMA_SPEC; then
            run_loads llama-spec "http://127.0.0.1:$PORT" e
            finish_server llama-spec
        else
            log "llama-server with $LLAMA_SPEC did not start; (e) with speculation skipped"
            stop_server "$SERVER_PID"
            SERVER_PID=""
        fi
    fi
}

# ---- transformers serve: continuous batching, CPU, float32 --------------------------------------------
run_transformers() {
    ensure_peer_venv
    note_bandwidth transformers
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
    log "transformers: $("$PEER_VENV/bin/python" -c 'import transformers; print("transformers", transformers.__version__)'),"\
" $blocks blocks of $block tokens, on 127.0.0.1:$port (log $OUT/transformers-server.log)"
    "${PIN[@]}" "$PEER_VENV/bin/transformers" serve --continuous-batching --device cpu --dtype float32 \
        --cb-block-size "$block" --cb-num-blocks "$blocks" --cb-max-batch-tokens 4096 \
        --host 127.0.0.1 --port "$port" "$MODEL_DIR" >"$OUT/transformers-server.log" 2>&1 &
    SERVER_PID=$!
    wait_http "http://127.0.0.1:$port/health" "$SERVER_PID" "$OUT/transformers-server.log" 600 \
        || { log "transformers serve did not start"; exit 1; }
    echo "transformers: torch.float32 on cpu" >>"$OUT/setup.txt"
    run_loads transformers "http://127.0.0.1:$port" "$(loads_without_e)"
    finish_server transformers
}

run_peers() {
    local peer
    for peer in $PEERS; do
        case $peer in
            llama) run_llama ;;
            transformers) run_transformers ;;
            *) log "unknown peer $peer (known: llama transformers)"; exit 1 ;;
        esac
    done
}

case ${BENCH_ONLY:-all} in
    ours) run_ours ;;
    peer | peers) run_peers ;;
    *) run_ours; run_peers ;;
esac

log "load after the run: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc --all) cores"
"$PY" -m bench.table "$OUT"
log "results in $OUT"
