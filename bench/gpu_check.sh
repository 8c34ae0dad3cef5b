#!/usr/bin/env bash
# GPU check (issue 4): correctness oracle on CUDA vs Hugging Face, then offline throughput of 256 prompts,
# ours (LLMEngine) vs HF continuous batching, for a Qwen3-0.6B-shaped and a Llama-3-8B-shaped model built
# here from configs with seeded random weights. No network, no model files: fits a bare H200 machine.
#
#   bench/gpu_check.sh                 # the full check, bounded to ~7.5 minutes (BUDGET_S, default 420)
#   bench/gpu_check.sh --smoke         # tiny model on CPU, to check the plumbing without a GPU
#   bench/gpu_check.sh --models qwen3-0.6b --num-prompts 64    # any other bench.gpu_check option
#
# Python: $PYTHON, else ./.venv/bin/python, else python3 (the machine's own torch + transformers).
set -euo pipefail
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
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# The model directories (up to ~16 GB for the 8B shape) go to local disk, and are removed at the end.
export TMPDIR=${TMPDIR:-/tmp}

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
    print("flash-attn: absent (our engine falls back to its torch attention backend)")
EOF

# The hard stop sits a little past the script's own budget, so a cut-short run still prints its table.
exec timeout --signal=INT $((BUDGET_S + 60)) "$PY" -m bench.gpu_check --budget-s "$BUDGET_S" "$@"
