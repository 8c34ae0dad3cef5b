"""Routing traces for the expert-parallel simulation (bench/ep_sim.py): the file format, synthetic traces
with a stated skew, and traces recorded from our own engine's MoE layers.

A trace is a .npz holding, for every MoE layer, the expert ids each token was routed to:
    layer_<i>    int16 [tokens, top_k]  (i: the model's layer index; dense layers have no entry)
    seq_lens     int64 [sequences]      tokens per sequence, in the order the tokens are stored
    num_experts  int64 scalar
    meta         a JSON string: where the ids came from and with which parameters
A trace recorded from a real checkpoint later (hooks on SparseMoE, as `record` does) replays as is.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from inference.models.layers.moe.layer import route

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Trace:
    layers: dict[int, IntArray]  # layer index -> expert ids [tokens, top_k]
    seq_lens: IntArray
    num_experts: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def num_tokens(self) -> int:
        return int(self.seq_lens.sum())

    @property
    def top_k(self) -> int:
        return int(next(iter(self.layers.values())).shape[1])

    def validate(self) -> Trace:
        if not self.layers:
            raise ValueError("a trace needs at least one MoE layer")
        for index, ids in self.layers.items():
            if ids.ndim != 2 or ids.shape != (self.num_tokens, self.top_k):
                raise ValueError(
                    f"layer {index}: ids {ids.shape}, expected ({self.num_tokens}, {self.top_k})"
                )
            if ids.min() < 0 or ids.max() >= self.num_experts:
                raise ValueError(f"layer {index}: expert ids outside [0, {self.num_experts})")
        return self

    def split(self, sequences: int) -> tuple[Trace, Trace]:
        """The first `sequences` sequences (the warm-up) and the rest."""
        cut = int(self.seq_lens[:sequences].sum())
        head = {i: ids[:cut] for i, ids in self.layers.items()}
        tail = {i: ids[cut:] for i, ids in self.layers.items()}
        return (
            Trace(head, self.seq_lens[:sequences], self.num_experts, self.meta),
            Trace(tail, self.seq_lens[sequences:], self.num_experts, self.meta),
        )


def save_trace(trace: Trace, path: Path) -> None:
    arrays: dict[str, Any] = {f"layer_{i}": ids.astype(np.int16) for i, ids in trace.layers.items()}
    arrays.update(seq_lens=trace.seq_lens, num_experts=np.int64(trace.num_experts))
    np.savez_compressed(path, meta=np.array(json.dumps(trace.meta)), **arrays)


def load_trace(path: Path) -> Trace:
    with np.load(path) as data:
        layers = {
            int(k.split("_", 1)[1]): data[k].astype(np.int64) for k in data.files if k.startswith("layer_")
        }
        trace = Trace(
            dict(sorted(layers.items())),
            data["seq_lens"].astype(np.int64),
            int(data["num_experts"]),
            json.loads(str(data["meta"])) if "meta" in data.files else {},
        )
    return trace.validate()


@dataclass(frozen=True)
class Skew:
    """Router logits of one layer: logit[t, e] = log(p_e) + noise * z[t, e], where p_e ~ 1/rank(e)^zipf
    over a per-layer random ranking of the experts, and z[t] = rho*z[t-1] + sqrt(1-rho^2)*eps[t] along each
    sequence (unit variance; rho: how alike consecutive tokens' routing is). zipf=0: no popular experts."""

    zipf: float = 0.3
    noise: float = 1.0
    rho: float = 0.5


def synthetic_logits(
    gen: np.random.Generator, skew: Skew, num_experts: int, sequences: int, length: int
) -> npt.NDArray[np.float32]:
    """Logits [sequences * length, experts], sequence-major."""
    ranks = gen.permutation(num_experts) + 1
    bias = -skew.zipf * np.log(ranks)
    z = gen.standard_normal((sequences, length, num_experts), dtype=np.float32)
    z[:, 1:] *= np.float32(np.sqrt(1.0 - skew.rho**2))
    for t in range(1, length):
        z[:, t] += np.float32(skew.rho) * z[:, t - 1]
    z *= np.float32(skew.noise)
    z += bias.astype(np.float32)
    return z.reshape(sequences * length, num_experts)


def synthetic_trace(
    *,
    num_experts: int,
    top_k: int,
    num_layers: int,
    renormalize: bool,
    sequences: int,
    length: int,
    skew: Skew,
    seed: int = 0,
) -> Trace:
    """Synthetic logits through our router (`route`), one independent popularity ranking per layer."""
    gen = np.random.default_rng(seed)
    layers: dict[int, IntArray] = {}
    for layer in range(num_layers):
        logits = torch.from_numpy(synthetic_logits(gen, skew, num_experts, sequences, length))
        _, ids = route(logits, top_k, renormalize=renormalize)
        layers[layer] = ids.numpy().astype(np.int64)
    meta = {"source": "synthetic", "zipf": skew.zipf, "noise": skew.noise, "rho": skew.rho, "seed": seed}
    return Trace(layers, np.full(sequences, length, dtype=np.int64), num_experts, meta).validate()


# A tiny random OLMoE-family model for `record`, in the style of the tests' TINY_CONFIGS.
RECORD_CONFIG: dict[str, Any] = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 1,
    "pad_token_id": 0,
}


def build_tiny_moe(out_dir: Path, kind: str = "olmoe", seed: int = 0, **overrides: Any) -> Path:
    """A random-weight HF MoE checkpoint (safetensors) with a throwaway word-level tokenizer beside it."""
    from tokenizers import Tokenizer, models
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    options = {**RECORD_CONFIG, **overrides}
    config = AutoConfig.for_model(kind, **options)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():  # HF one-inits norms: randomise every weight
            param.copy_(1.0 + 0.2 * torch.randn_like(param)) if "norm" in name else param.normal_(0.0, 0.1)
    model.save_pretrained(out_dir)
    vocab = {f"w{i}": i for i in range(int(options["vocab_size"]))}
    words = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    PreTrainedTokenizerFast(tokenizer_object=words, unk_token="w0", eos_token="w1").save_pretrained(out_dir)
    return out_dir


def record(model_dir: Path, sequences: list[list[int]]) -> Trace:
    """Prefill `sequences` through our engine (load_model + ModelRunner, fp32 CPU) in one step; a forward
    hook on every SparseMoE routes the layer's own input with the layer's own gate, as its forward does."""
    from inference.core.model_io import ScheduledChunk
    from inference.core.model_runner import ModelRunner
    from inference.models.layers.moe.layer import SparseMoE
    from inference.models.loader.load import load_model

    loaded = load_model(str(model_dir), dtype="float32", device="cpu")
    total = sum(len(s) for s in sequences)
    block = 16
    runner = ModelRunner(
        loaded,
        block_size=block,
        max_num_seqs=len(sequences),
        max_num_batched_tokens=total,
        max_model_len=None,
        kv_cache_memory_bytes=32 << 20,
        gpu_memory_utilization=0.9,
    )
    recorded: dict[int, list[IntArray]] = {}
    hooks = []
    for name, moe in loaded.model.named_modules():
        if not isinstance(moe, SparseMoE):
            continue
        index = int(name.split(".")[-2])  # model.layers.<index>.mlp

        def hook(module: SparseMoE, inputs: tuple[torch.Tensor, ...], _out: Any, index: int = index) -> None:
            _, ids = route(module.gate(inputs[0]), module.moe.top_k, renormalize=module.moe.renormalize)
            recorded.setdefault(index, []).append(ids.numpy().astype(np.int64))

        hooks.append(moe.register_forward_hook(hook))
    chunks, next_block = [], 0
    for ids in sequences:
        blocks = -(-len(ids) // block)
        chunks.append(ScheduledChunk(ids, 0, len(ids), list(range(next_block, next_block + blocks))))
        next_block += blocks
    try:
        with torch.no_grad():
            runner.execute(chunks)
    finally:
        for handle in hooks:
            handle.remove()
    layers_ids = {i: np.concatenate(parts) for i, parts in recorded.items()}
    num_experts = int(loaded.hf_config.num_experts)
    meta = {"source": "recorded", "model": loaded.architecture, "note": "tiny random-weight model"}
    return Trace(layers_ids, np.array([len(s) for s in sequences]), num_experts, meta).validate()


def record_tiny(sequences: int = 8, length: int = 64, seed: int = 0) -> Trace:
    """`record` on a freshly built tiny OLMoE over random token ids (no real weights exist here)."""
    gen = np.random.default_rng(seed)
    tokens = [gen.integers(2, RECORD_CONFIG["vocab_size"], length).tolist() for _ in range(sequences)]
    with tempfile.TemporaryDirectory() as tmp:
        return record(build_tiny_moe(Path(tmp), seed=seed), tokens)
