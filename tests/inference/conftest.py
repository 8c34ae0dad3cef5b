"""Shared fixtures for the real default model (SmolLM2-135M-Instruct, converted once from its GGUF)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import inference.device
from inference.models.gguf.convert import ensure_converted
from inference.models.loader.load import LoadedModel, load_model
from inference.models.loader.source import default_gguf_path
from tests.live_server import shared_cache_dir

# One intra-op thread: test runs share 2 cores with Daphne servers and other workers, and contended
# OpenMP barriers made 2-thread decode steps ~6x slower than 1-thread ones. Runners built with
# cpu_threads=None take "every core"; here that is this many. Servers these tests start read the variable
# through the web layer, as before.
os.environ.setdefault("MOONCAKE_CPU_THREADS", "1")
TEST_CPU_THREADS = int(os.environ["MOONCAKE_CPU_THREADS"])
torch.set_num_threads(TEST_CPU_THREADS)  # the HF reference models run in this process too
# Without a GPU the Triton kernels run in Triton's CPU interpreter; it is chosen when a kernel is defined,
# so before any test module imports inference.models.layers.attention.triton_decode.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_CACHE_DIR = shared_cache_dir()


@pytest.fixture(scope="session", autouse=True)
def _test_cpu_threads() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(inference.device, "cpu_core_count", lambda: TEST_CPU_THREADS)
        yield


@pytest.fixture(scope="session")
def test_cache_dir() -> Path:
    """The servers' cache too (converted models, compiled kernels): one conversion and one compile per
    checkout, as replicas of a deployment share one cache."""
    TEST_CACHE_DIR.mkdir(parents=True, exist_ok=True)
    return TEST_CACHE_DIR


@pytest.fixture(scope="session")
def default_model_dir(test_cache_dir: Path) -> Path:
    """HF-style directory (config.json, model.safetensors, tokenizer) of the bundled default model."""
    return ensure_converted(default_gguf_path(), test_cache_dir)


@pytest.fixture(scope="session")
def default_loaded(default_model_dir: Path) -> LoadedModel:
    """Our implementation of the default model, fp32 on CPU. A runner binds its KV cache to the model,
    so use it with one ModelRunner at a time (build the runner inside the test)."""
    return load_model(str(default_model_dir), dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def hf_reference(default_model_dir: Path) -> Iterator[torch.nn.Module]:
    """Hugging Face's own LlamaForCausalLM over the same converted weights: the correctness oracle."""
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()
    yield model


TINY_CONFIGS: dict[str, dict[str, object]] = {
    # GQA, untied head, llama3 rope scaling active well inside the test lengths.
    "llama-rope-llama3": {
        "kind": "llama",
        "num_key_value_heads": 2,
        "tie_word_embeddings": False,
        "max_position_embeddings": 512,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    },
    "llama-rope-linear-bias": {
        "kind": "llama",
        "num_key_value_heads": 4,
        "tie_word_embeddings": True,
        "attention_bias": True,
        "mlp_bias": True,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    },
    "qwen2": {"kind": "qwen2", "num_key_value_heads": 2, "tie_word_embeddings": True},
    "qwen3": {"kind": "qwen3", "num_key_value_heads": 1, "head_dim": 32, "tie_word_embeddings": False},
    # Mixture-of-experts: 4-8 experts, top-2, each family's own routing and layer placement.
    "mixtral": {
        "kind": "mixtral",
        "num_key_value_heads": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
    },
    "qwen2-moe": {
        "kind": "qwen2_moe",
        "num_key_value_heads": 2,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 48,
        "mlp_only_layers": [1],  # layer 1 is dense: the placement rule matters
        "norm_topk_prob": False,
        "tie_word_embeddings": True,
    },
    # As llama.cpp writes Qwen2-MoE GGUFs: every layer sparse.
    "qwen2-moe-all-sparse": {
        "kind": "qwen2_moe",
        "num_key_value_heads": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,  # the block kernels take inputs in whole 64s
        "shared_expert_intermediate_size": 64,
        "norm_topk_prob": False,
        "tie_word_embeddings": True,
    },
    "qwen3-moe": {
        "kind": "qwen3_moe",
        "num_key_value_heads": 1,
        "head_dim": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "norm_topk_prob": True,
        "tie_word_embeddings": False,
    },
    # Served by a live server (tests/webapp/live_models.py): the tokenizer's whole vocabulary, so any text
    # encodes to ids the model has.
    "qwen3-moe-chat": {
        "kind": "qwen3_moe",
        "vocab_size": 49152,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "norm_topk_prob": True,
        "tie_word_embeddings": True,
    },
    # Dense families served the same way; windows shorter than a chat prompt with its template, so they bite.
    "mistral-chat": {"kind": "mistral", "vocab_size": 49152, "num_key_value_heads": 2, "sliding_window": 16},
    "gemma2-chat": {
        "kind": "gemma2",
        "vocab_size": 49152,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "sliding_window": 16,
        "attn_logit_softcapping": 1.5,
        "final_logit_softcapping": 4.0,
        "num_hidden_layers": 3,
    },
    "phi3-chat": {"kind": "phi3", "vocab_size": 49152, "num_key_value_heads": 2, "pad_token_id": 0},
    "olmoe": {
        "kind": "olmoe",
        "num_key_value_heads": 4,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "clip_qkv": 0.8,  # below the largest projections' values, so the clipping is exercised
        "tie_word_embeddings": False,
    },
    # Dense families with their own layers. Windows far below the test prompts (130 tokens) so every
    # window mask bites; soft caps small enough to change the logits of these small random weights.
    "mistral-window": {"kind": "mistral", "num_key_value_heads": 2, "sliding_window": 32},
    "gemma2": {
        "kind": "gemma2",
        "num_key_value_heads": 2,
        "head_dim": 16,
        "query_pre_attn_scalar": 24,  # not head_dim: the scale must come from here
        "sliding_window": 24,
        "attn_logit_softcapping": 1.5,
        "final_logit_softcapping": 4.0,
        "num_hidden_layers": 3,  # sliding, full, sliding
    },
    "gemma3": {
        "kind": "gemma3_text",
        "num_key_value_heads": 1,
        "head_dim": 16,
        "query_pre_attn_scalar": 24,
        "sliding_window": 20,
        "num_hidden_layers": 4,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 1000.0},
            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100000.0},
        },
        "final_logit_softcapping": 6.0,
        "tie_word_embeddings": False,
    },
    # LongRoPE: sequence a (130 tokens) passes original_max_position_embeddings and takes the long factors,
    # b (40) keeps the short ones.
    "phi3-longrope": {
        "kind": "phi3",
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "original_max_position_embeddings": 64,
        "rope_scaling": {
            "rope_type": "longrope",
            "short_factor": [1.0 + 0.15 * i for i in range(8)],
            "long_factor": [1.5 + 0.8 * i for i in range(8)],
        },
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}


def build_tiny_model_dir(name: str, out_dir: Path, tokenizer_dir: Path) -> Path:
    """Random-weight HF model saved as safetensors, with the default model's tokenizer files beside it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    options = dict(TINY_CONFIGS[name])
    kind = options.pop("kind")  # the HF model_type
    settings: dict[str, object] = {
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "rms_norm_eps": 1e-6,
    }
    config = AutoConfig.for_model(str(kind), **{**settings, **options})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        # HF zero-inits biases and one-inits norms; randomize everything so every weight matters.
        for param_name, param in model.named_parameters():
            if "norm" in param_name:
                param.copy_(1.0 + 0.2 * torch.randn_like(param))
            else:
                param.normal_(0.0, 0.1)
    model.save_pretrained(out_dir)
    for file in tokenizer_dir.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(file, out_dir / file.name)
    return out_dir


@pytest.fixture(scope="session")
def tiny_model_dir(
    tmp_path_factory: pytest.TempPathFactory, default_model_dir: Path
) -> Callable[[str], Path]:
    """Factory: name in TINY_CONFIGS -> a saved random-weight model directory (built once per session)."""
    built: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in built:
            built[name] = build_tiny_model_dir(name, tmp_path_factory.mktemp(name), default_model_dir)
        return built[name]

    return make
