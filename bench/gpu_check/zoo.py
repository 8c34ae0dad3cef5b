"""The model zoo: config shapes, a directory of seeded random weights per shape, and the prompts."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from bench.gpu_check.report import Settings

SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        "kind": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "llama3-8b": {
        "kind": "llama",
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rope_theta": 500_000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    # --smoke: small enough for a CPU in seconds, still GQA and untied.
    "tiny-llama": {
        "kind": "llama",
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "rope_theta": 10_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
}


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def num_params(name: str) -> int:
    s = SHAPES[name]
    hidden, heads, kv = s["hidden_size"], s["num_attention_heads"], s["num_key_value_heads"]
    head_dim = s.get("head_dim", hidden // heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim
    layer = attention + 3 * hidden * s["intermediate_size"]
    embeddings = s["vocab_size"] * hidden * (1 if s["tie_word_embeddings"] else 2)
    return s["num_hidden_layers"] * layer + embeddings


def eos_id(name: str) -> int:
    return int(SHAPES[name]["vocab_size"]) - 1


def word_tokenizer(vocab_size: int, eos: int) -> Any:
    """A word-level tokenizer over `t0 .. t{n-1}`: prompts are token ids anyway, and it needs no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=f"t{eos}", pad_token=f"t{eos}", unk_token="t0"
    )


def build_model(name: str, out_dir: Path, settings: Settings) -> Any:
    """Seeded random weights in the target dtype and device; saved to out_dir; returns the HF model."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    shape = dict(SHAPES[name])
    kind = shape.pop("kind")
    config_cls, model_cls = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    }[kind]
    eos = eos_id(name)
    config = config_cls(**shape, bos_token_id=1, eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(settings.seed)
    previous = torch.get_default_dtype()
    # Initialized directly in the final dtype on the device, as from_pretrained(dtype=...) does: 16 GB for
    # the 8B shape, where float32 first would need 48 GB and a cast.
    torch.set_default_dtype(torch_dtype(settings.dtype))
    try:
        with torch.device(settings.device):
            model = model_cls(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.eos_token_id = eos
    # One shard (transformers 5 always writes safetensors): the writer is sequential anyway.
    model.save_pretrained(out_dir, max_shard_size="50GB")
    word_tokenizer(shape["vocab_size"], eos).save_pretrained(out_dir)
    if settings.device.startswith("cuda"):
        torch.cuda.synchronize()
    return model


def make_prompts(settings: Settings, vocab_size: int) -> tuple[list[list[int]], list[int]]:
    """The throughput workload: random token ids and output lengths (EOS is ignored on both sides)."""
    rng = random.Random(settings.seed)
    prompts = [
        [rng.randrange(2, vocab_size - 1) for _ in range(rng.randint(*settings.input_len))]
        for _ in range(settings.num_prompts)
    ]
    outputs = [rng.randint(*settings.output_len) for _ in range(settings.num_prompts)]
    return prompts, outputs


def oracle_prompts(settings: Settings, vocab_size: int) -> list[list[int]]:
    rng = random.Random(settings.seed + 7)
    lengths = [5, 33, 100, 257, 18, 64][: settings.oracle_prompts]
    return [[rng.randrange(2, vocab_size - 1) for _ in range(n)] for n in lengths]
