"""Sentence embeddings from an encoder's last hidden states, as sentence-transformers pools them.

A model folder says how in sentence-transformers' files: modules.json lists a Pooling module (its folder,
usually 1_Pooling, holds config.json with the mode) and, for unit-length vectors, a Normalize module.
Without modules.json the mode is mean and the vectors are normalised, what most embedding models expect.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F

PoolingMode = Literal["mean", "cls", "last"]
POOLING_MODES: tuple[PoolingMode, ...] = ("mean", "cls", "last")
# sentence-transformers' flags (older configs) and its `pooling_mode` names (newer ones), mapped to ours.
_FLAGS: dict[str, PoolingMode] = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_lasttoken": "last",
}
_NAMES: dict[str, PoolingMode] = {"mean": "mean", "cls": "cls", "lasttoken": "last", "last": "last"}
_UNSUPPORTED_FLAGS = (
    "pooling_mode_max_tokens",
    "pooling_mode_mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens",
)
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"


@dataclass(frozen=True, slots=True)
class Pooling:
    mode: PoolingMode = "mean"
    normalize: bool = True

    def __post_init__(self) -> None:
        if self.mode not in POOLING_MODES:
            raise ValueError(f"pooling mode must be one of {POOLING_MODES}, got {self.mode!r}")


def read_pooling(model_dir: Path, *, default_mode: PoolingMode = "mean") -> Pooling:
    """The pooling a model folder's sentence-transformers files ask for (ValueError for one we lack)."""
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        pooling_dir = model_dir / "1_Pooling"
        mode = _mode(pooling_dir / "config.json") if pooling_dir.is_dir() else None
        return Pooling(mode or default_mode, normalize=True)
    modules: list[dict[str, Any]] = json.loads(modules_file.read_text())
    types = [str(m.get("type", "")) for m in modules]
    pooling = next((m for m in modules if m.get("type") == _POOLING), None)
    mode = None
    if pooling is not None:
        folder = _inside(model_dir, str(pooling.get("path", "1_Pooling")))
        mode = _mode(folder / "config.json")
    return Pooling(mode or default_mode, normalize=_NORMALIZE in types)


def _inside(model_dir: Path, relative: str) -> Path:
    """A module's folder, which modules.json names: it must stay inside the model folder."""
    folder = (model_dir / relative).resolve()
    if not folder.is_relative_to(model_dir.resolve()):
        raise ValueError(f"modules.json names a folder outside the model: {relative!r}")
    return folder


def _mode(config_file: Path) -> PoolingMode | None:
    if not config_file.is_file():
        return None
    config: dict[str, Any] = json.loads(config_file.read_text())
    if "pooling_mode" in config:
        name = str(config["pooling_mode"])
        if name not in _NAMES:
            raise ValueError(f"pooling mode {name!r} is unsupported (mean, cls or lasttoken)")
        return _NAMES[name]
    unsupported = [flag for flag in _UNSUPPORTED_FLAGS if config.get(flag)]
    chosen = [mode for flag, mode in _FLAGS.items() if config.get(flag)]
    if unsupported or len(chosen) > 1:
        raise ValueError(f"pooling {config_file} combines or uses unsupported modes (mean, cls or lasttoken)")
    return chosen[0] if chosen else None


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: Pooling) -> torch.Tensor:
    """[batch, length, hidden] states of right-padded rows -> [batch, hidden] embeddings, in fp32."""
    hidden = hidden.float()
    mask = attention_mask.to(hidden.dtype)
    if pooling.mode == "mean":
        summed = (hidden * mask[..., None]).sum(dim=1)
        pooled = summed / mask.sum(dim=1, keepdim=True).clamp(min=1e-9)
    elif pooling.mode == "cls":
        pooled = hidden[:, 0]
    else:
        last = attention_mask.long().sum(dim=1) - 1
        pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
    return F.normalize(pooled, p=2, dim=-1) if pooling.normalize else pooled
