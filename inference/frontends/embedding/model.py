"""An embedding model loaded for serving: a BERT encoder, its tokenizer and its pooling, run on padded
batches.

Only safetensors weights are read (resolve_source refuses pickles and confines the source to the model
roots), and the tokenizer is the folder's tokenizer.json through transformers' fast tokenizer, no remote code.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from inference.cache_dir import DEFAULT_CACHE_DIR
from inference.config import EngineConfig
from inference.device import cpu_thread_count, resolve_device, resolve_dtype
from inference.frontends.embedding.bundled import DEFAULT_EMBEDDING_SOURCE, bundled_model_dir
from inference.models.architectures.bert import BertArgs, BertEncoder
from inference.models.layers.pooling import Pooling, pool, read_pooling
from inference.models.loader.source import ModelSourceError, resolve_source

logger = logging.getLogger(__name__)

_ENCODER_TYPES = ("bert",)


@dataclass
class EmbeddingModel:
    encoder: BertEncoder
    tokenizer: Any
    pooling: Pooling
    device: torch.device
    dtype: torch.dtype
    max_model_len: int
    dimensions: int
    # The model was trained so that a prefix of its vector is an embedding too (Matryoshka): clients may
    # ask for fewer dimensions.
    truncatable: bool
    architecture: str
    num_params: int
    size_on_disk: int
    model_dir: Path
    pad_token_id: int = 0

    @property
    def memory_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.encoder.parameters())

    @torch.inference_mode()
    def embed(self, batch: list[list[int]]) -> list[list[float]]:
        """One forward pass over `batch` (right-padded to its longest row): one unit-or-not vector per row."""
        longest = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), longest), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[row, : len(ids)] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        hidden = self.encoder(input_ids, mask)
        vectors: list[list[float]] = pool(hidden, mask, self.pooling).cpu().tolist()
        return vectors


def model_dir_for(config: EngineConfig) -> Path:
    """The folder `config.model` names: the bundled default embedding model, or a safetensors folder."""
    if config.model == DEFAULT_EMBEDDING_SOURCE:
        return bundled_model_dir(Path(config.cache_dir) if config.cache_dir else DEFAULT_CACHE_DIR)
    path = resolve_source(config.model, model_roots=config.model_roots)
    if not path.is_dir():
        raise ModelSourceError(f"{path}: an embedding model must be a folder with safetensors weights")
    return path


def load_embedding_model(config: EngineConfig) -> EmbeddingModel:
    started = time.monotonic()
    model_dir = model_dir_for(config)
    hf: dict[str, Any] = json.loads((model_dir / "config.json").read_text())
    if hf.get("model_type") not in _ENCODER_TYPES:
        raise ModelSourceError(
            f"embedding models must be BERT encoders (model_type 'bert'), got {hf.get('model_type')!r}"
        )
    args = BertArgs.from_hf(hf)
    device = resolve_device(config.device)
    # "auto" is fp32 on CPU: embedding encoders are small, and bf16 would move vectors visibly.
    dtype = (
        torch.float32
        if config.dtype == "auto" and device.type == "cpu"
        else resolve_dtype(config.dtype, device)
    )
    if device.type == "cpu":
        torch.set_num_threads(cpu_thread_count(config.cpu_threads))
    torch.manual_seed(config.seed)
    encoder = BertEncoder(args)
    encoder.load_safetensors(model_dir)
    encoder = encoder.to(device=device, dtype=dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir, use_fast=True, trust_remote_code=False)
    if not getattr(tokenizer, "is_fast", False):
        raise ModelSourceError(f"{model_dir} has no tokenizer.json (a fast tokenizer is required)")
    limits = [args.max_position_embeddings, _sentence_max_len(model_dir), config.max_model_len]
    model = EmbeddingModel(
        encoder=encoder,
        tokenizer=tokenizer,
        pooling=read_pooling(model_dir),
        device=device,
        dtype=dtype,
        max_model_len=min(limit for limit in limits if limit),
        dimensions=args.hidden_size,
        truncatable=bool(hf.get("is_matryoshka") or hf.get("matryoshka_dimensions")),
        architecture=str((hf.get("architectures") or ["BertModel"])[0]),
        num_params=sum(p.numel() for p in encoder.parameters()),
        size_on_disk=sum(p.stat().st_size for p in model_dir.glob("*.safetensors")),
        model_dir=model_dir,
        pad_token_id=int(hf.get("pad_token_id") or 0),
    )
    logger.info(
        "Loaded embedding model %s (%s, %.1fM params, %s on %s, %s pooling) in %.1fs",
        config.model,
        model.architecture,
        model.num_params / 1e6,
        dtype,
        device,
        model.pooling.mode,
        time.monotonic() - started,
    )
    return model


def _sentence_max_len(model_dir: Path) -> int | None:
    """sentence-transformers' max_seq_length: the length the model was trained to embed."""
    path = model_dir / "sentence_bert_config.json"
    if not path.is_file():
        return None
    value = json.loads(path.read_text()).get("max_seq_length")
    return int(value) if value else None
