"""A hand-made Hugging Face cache: a hub model's snapshot laid out as huggingface_hub leaves it."""

from __future__ import annotations

import json
import struct
from pathlib import Path

REPO = "mirror-org/tiny-llama"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ELEMENTS = 1000 * 64


def hub_snapshot(hf_home: Path, repo: str = REPO) -> Path:
    """`repo` in HF_HOME's cache (models--org--name, refs/main, snapshots/<commit>): a small Llama config and
    one float32 safetensors file of ELEMENTS elements."""
    storage = hf_home / "hub" / f"models--{repo.replace('/', '--')}"
    snapshot = storage / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (storage / "refs").mkdir()
    (storage / "refs" / "main").write_text(COMMIT, encoding="utf-8")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "max_position_embeddings": 128, "vocab_size": 1000,
    }  # fmt: skip
    (snapshot / "config.json").write_text(json.dumps(config), encoding="utf-8")
    tensor = {"dtype": "F32", "shape": [1000, 64], "data_offsets": [0, ELEMENTS * 4]}
    header = json.dumps({"model.embed_tokens.weight": tensor}).encode()
    (snapshot / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + bytes(ELEMENTS * 4)
    )
    return snapshot
