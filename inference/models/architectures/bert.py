"""A BERT encoder (BertModel's structure, so its checkpoints load by name): word, position and token-type
embeddings, then post-LayerNorm blocks of bidirectional self-attention over the unpadded keys and a GELU
feed-forward. The embedding front-end (inference.frontends.embedding) pools its last hidden states.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors import safe_open
from torch import nn

# Checkpoint entries with no parameter of ours: BertModel's unused pooler head, the masked-LM head of a
# BertForMaskedLM, and position ids some exporters save as a buffer.
_IGNORED_PREFIXES = ("pooler.", "cls.")
_IGNORED_NAMES = frozenset({"embeddings.position_ids"})
_ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


@dataclass(frozen=True, slots=True)
class BertArgs:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_act: str = "gelu"

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> BertArgs:
        """From config.json; refuses what this encoder does not implement rather than computing wrongly."""
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"BERT position_embedding_type {config['position_embedding_type']!r} is unsupported"
            )
        if config.get("hidden_act", "gelu") not in _ACTIVATIONS:
            raise ValueError(f"BERT hidden_act {config['hidden_act']!r} is unsupported")
        if config["hidden_size"] % config["num_attention_heads"]:
            raise ValueError("BERT hidden_size must be a multiple of num_attention_heads")
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            num_hidden_layers=int(config["num_hidden_layers"]),
            num_attention_heads=int(config["num_attention_heads"]),
            intermediate_size=int(config["intermediate_size"]),
            max_position_embeddings=int(config["max_position_embeddings"]),
            type_vocab_size=int(config.get("type_vocab_size", 2)),
            layer_norm_eps=float(config.get("layer_norm_eps", 1e-12)),
            hidden_act=str(config.get("hidden_act", "gelu")),
        )


class _Embeddings(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(args.vocab_size, args.hidden_size)
        self.position_embeddings = nn.Embedding(args.max_position_embeddings, args.hidden_size)
        self.token_type_embeddings = nn.Embedding(args.type_vocab_size, args.hidden_size)
        self.LayerNorm = nn.LayerNorm(args.hidden_size, eps=args.layer_norm_eps)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        # One segment: every token has type 0, as a tokenizer gives a single text.
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions)[None]
        x = x + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class _Projection(nn.Module):
    """A dense layer, then (after dropout, a no-op at inference) a residual add and LayerNorm: BERT's
    "output" modules."""

    def __init__(self, into: int, out: int, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(into, out)
        self.LayerNorm = nn.LayerNorm(out, eps=eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class _SelfAttention(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.query = nn.Linear(args.hidden_size, args.hidden_size)
        self.key = nn.Linear(args.hidden_size, args.hidden_size)
        self.value = nn.Linear(args.hidden_size, args.hidden_size)
        self.heads = args.num_attention_heads

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, length, self.heads, hidden // self.heads).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        # Bidirectional: every token sees every real token; padding keys are masked out.
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=key_mask[:, None, None, :], scale=1.0 / math.sqrt(hidden // self.heads)
        )
        return out.transpose(1, 2).reshape(batch, length, hidden)


class _Attention(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.self = _SelfAttention(args)
        self.output = _Projection(args.hidden_size, args.hidden_size, args.layer_norm_eps)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, key_mask), x)


class _Intermediate(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.dense = nn.Linear(args.hidden_size, args.intermediate_size)
        self.act = _ACTIVATIONS[args.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))


class _Layer(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.attention = _Attention(args)
        self.intermediate = _Intermediate(args)
        self.output = _Projection(args.intermediate_size, args.hidden_size, args.layer_norm_eps)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> torch.Tensor:
        x = self.attention(x, key_mask)
        return self.output(self.intermediate(x), x)


class _Encoder(nn.Module):
    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.layer = nn.ModuleList(_Layer(args) for _ in range(args.num_hidden_layers))


class BertEncoder(nn.Module):
    """input_ids [batch, length] and attention_mask [batch, length] (1 real, 0 padding) -> last hidden
    states [batch, length, hidden]."""

    def __init__(self, args: BertArgs) -> None:
        super().__init__()
        self.args = args
        self.embeddings = _Embeddings(args)
        self.encoder = _Encoder(args)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        key_mask = attention_mask.bool()
        x = self.embeddings(input_ids)
        for layer in self.encoder.layer:
            x = layer(x, key_mask)
        return x

    def load_safetensors(self, model_dir: Path) -> None:
        """Copy every checkpoint tensor in by name; ValueError for an unknown, misshapen or missing one."""
        files = sorted(model_dir.glob("*.safetensors"))
        if not files:
            raise ValueError(f"no *.safetensors files in {model_dir}")
        params = dict(self.named_parameters())
        missing = set(params)
        for file in files:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for stored in f.keys():  # noqa: SIM118 - safe_open handles are not iterable
                    name = _our_name(stored)
                    if name is None:
                        continue
                    if name not in params:
                        raise ValueError(f"checkpoint weight {stored} has no matching parameter")
                    tensor = f.get_tensor(stored)
                    if params[name].shape != tensor.shape:
                        raise ValueError(
                            f"weight {stored}: checkpoint shape {tuple(tensor.shape)} != "
                            f"model {tuple(params[name].shape)}"
                        )
                    with torch.no_grad():
                        params[name].copy_(tensor)
                    missing.discard(name)
        if missing:
            raise ValueError(
                f"checkpoint in {model_dir} is missing weights: {', '.join(sorted(missing)[:8])}"
            )


def _our_name(stored: str) -> str | None:
    """Our parameter for a checkpoint entry (None: one we do not use). BertFor* checkpoints prefix the
    encoder's names with "bert."; old TF exports call LayerNorm's weight and bias gamma and beta."""
    name = stored.removeprefix("bert.")
    if name in _IGNORED_NAMES or name.startswith(_IGNORED_PREFIXES):
        return None
    return name.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
