#!/usr/bin/env bash
# GPU check: correctness oracle on CUDA vs Hugging Face, then offline throughput of 256 prompts,
# ours (LLMEngine) vs HF continuous batching, for a Qwen3-0.6B-shaped and a Llama-3-8B-shaped model built
# here from configs with seeded random weights. No network, no model files: fits a bare H200 machine.
#
#   bench/gpu_check.sh                 # the full check, bounded to 7 minutes (BUDGET_S, default 420)
#   bench/gpu_check.sh --smoke         # tiny model on CPU, to check the plumbing without a GPU
#   bench/gpu_check.sh --models qwen3-0.6b --num-prompts 64    # any other bench.gpu_check option
#   bench/gpu_check.sh --eager         # our engine without CUDA graphs (enforce_eager)
#   bench/gpu_check.sh --sync-steps    # our engine without async scheduling (A/B against the pipeline)
#   bench/gpu_check.sh --kernels       # instead of the above: the Triton kernels (paged decode, the fused
#       MoE kernel; bench/gpu_kernels.py) and a mixture-of-experts model through our engine against
#       transformers (bench/gpu_moe_model.py), ~2 min
#   bench/gpu_check.sh --models qwen3-0.6b --dtype float32 --oracle-only   # the strict fp32 oracle
#       (tie tolerance 1e-3 instead of bf16 rounding; a minute or two on an H200)
#
# Our throughput run also prints the engine's own per-phase step times (schedule, inputs, forward, sample,
# outputs, wait) and its full-batch decode steps against their memory-bound floor (bench/gpu_check/floor.py;
# --bandwidth-gbs overrides the H200's 4300 GB/s copy ceiling).
#
# Python: $PYTHON, else ./.venv/bin/python, else python3 (the machine's own torch + transformers).
# With $OUT set (the device machine's folder of files that come back), the whole log goes to
# $OUT/gpu_check.log and the reports to $OUT/gpu_check.json (a later --json overrides).
set -euo pipefail
# The budget counts from here: the Python side reads this to fit its deadline to the whole run.
GPU_CHECK_T0=$(date +%s.%N)
export GPU_CHECK_T0
cd "$(dirname "$0")/.."

if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
elif [ -x .venv/bin/python ]; then
    PY=.venv/bin/python
else
    PY=python3
fi
BUDGET_S=${BUDGET_S:-420}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
# The model directories (up to ~16 GB for the 8B shape) go to local disk, and are removed at the end.
export TMPDIR=${TMPDIR:-/tmp}

preamble() {
"$PY" - <<'EOF'
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "safetensors", "tokenizers", "numpy") if not importlib.util.find_spec(m)]
if missing:
    sys.exit(f"missing Python packages: {', '.join(missing)} (this check installs nothing: no network)")
import torch, transformers
cuda = torch.cuda.is_available()
name = torch.cuda.get_device_name() if cuda else "no CUDA device"
print(f"torch {torch.__version__}, transformers {transformers.__version__}, {name}")
try:
    import flash_attn  # noqa: F401
    print("flash-attn: present")
except ImportError:
    print("flash-attn: absent (HF runs its paged sdpa attention; ours its non-flash backend)")
EOF
}

# The hard stop sits a little past the script's own budget (which already keeps a margin for teardown):
# SIGINT first, so a run that overran still prints its tables, then KILL if that hangs.
kernels() {
    preamble
    local failed=0
    timeout 240 "$PY" -m bench.gpu_kernels || failed=1
    timeout 180 "$PY" -m bench.gpu_moe_model ${GPU_TOKENIZER:+--tokenizer "$GPU_TOKENIZER"} || failed=1
    return $failed
}
if [ "${1:-}" = "--kernels" ]; then
    if [ -n "${OUT:-}" ]; then
        mkdir -p "$OUT"
        set +e
        kernels 2>&1 | tee "$OUT/gpu_kernels.log"
        exit "${PIPESTATUS[0]}"
    fi
    kernels
    exit $?
fi

check() {
    preamble
    timeout --signal=INT --kill-after=20 $((BUDGET_S + 30)) "$PY" -m bench.gpu_check --budget-s "$BUDGET_S" "$@"
}
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    set +e
    check --json "$OUT/gpu_check.json" "$@" 2>&1 | tee "$OUT/gpu_check.log"
    exit "${PIPESTATUS[0]}"
fi
check "$@"
