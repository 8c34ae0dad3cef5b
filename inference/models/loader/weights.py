"""Load checkpoints (safetensors, or a GGUF's own tensors) by parameter name, stacking Q/K/V and gate/up into
fused params."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open

from inference.models.architectures.decoder import DecoderForCausalLM
from inference.models.gguf.names import checkpoint_tensors
from inference.models.gguf.reader import GGUFFile
from inference.models.layers.linear import ShardedLinear
from inference.models.quantization.gguf.block_only import BlockOnlyLoad
from inference.models.quantization.gguf.formats import BlockMatrix, row_slice
from inference.progress import LOADING_WEIGHTS, Throttled

# Checkpoint entries with no parameter of ours: rotary caches some exporters save.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def load_weights(
    model: DecoderForCausalLM,
    model_dir: Path,
    *,
    blocks: BlockOnlyLoad | None = None,
    gguf: GGUFFile | None = None,
) -> None:
    """Copy every checkpoint tensor into `model`; raise ValueError on unknown or missing weights. The
    projections `blocks` plans have no dense weight: their tensors are only checked against the blocks.
    gguf: take the tensors from this file (one dequantized at a time) instead of model_dir's safetensors."""
    params = dict(model.named_parameters())
    modules = dict(model.named_modules())
    # A fused parameter is complete only when each of its shards was copied, so track (param, shard) pairs.
    pending: set[tuple[str, str]] = set()
    for name in params:
        if blocks is not None and name.rpartition(".")[0] in blocks.shards:
            continue
        owner = modules[name.rpartition(".")[0]]
        shards = owner.shard_offsets if isinstance(owner, ShardedLinear) else {"": None}
        pending.update((name, shard) for shard in shards)
    total = len(pending)
    progress = Throttled(LOADING_WEIGHTS, total)
    for name, tensor, rows in _gguf_tensors(model, gguf, blocks) if gguf else _checkpoint(model_dir):
        progress(total - len(pending))
        if name.endswith(_IGNORED_SUFFIXES):
            continue
        ours = model.checkpoint_name(name)
        if ours == "lm_head.weight" and model.lm_head is None:
            continue  # tied: the embedding serves as lm_head
        if blocks is not None and blocks.takes(ours, rows):
            continue
        filled, shard = _load_one(ours, tensor(), params, modules, model)
        owner = modules[filled.rpartition(".")[0]]
        if not shard and isinstance(owner, ShardedLinear):
            # A checkpoint that already fuses them (Phi-3's qkv_proj, gate_up_proj) fills every shard.
            pending.difference_update((filled, each) for each in owner.shard_offsets)
        pending.discard((filled, shard))
    progress(total - len(pending))
    if pending:
        missing = sorted({name for name, _ in pending})
        raise ValueError(f"checkpoint in {model_dir} is missing weights: {', '.join(missing[:8])}")


# (checkpoint name, its tensor when asked, a reader of its rows [start, stop) alone)
_Entry = tuple[str, Callable[[], torch.Tensor], Callable[[int, int], torch.Tensor]]


def _checkpoint(model_dir: Path) -> Iterator[_Entry]:
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors files in {model_dir}")
    for file in files:
        with safe_open(str(file), framework="pt", device="cpu") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open handles are not iterable
                yield name, functools.partial(f.get_tensor, name), _row_reader(f, name)


def _gguf_tensors(
    model: DecoderForCausalLM, gguf: GGUFFile, blocks: BlockOnlyLoad | None
) -> Iterator[_Entry]:
    """The file's tensors under checkpoint names. Those read as stored blocks are never dequantized whole:
    the rows `blocks` compares come from gguf-py's dequantization of the very blocks the kernels read."""
    sources = blocks.sources if blocks is not None else {}
    for name, matrix in sources.items():
        yield name, _no_dense(name), _block_rows(matrix)
    args = model.args
    skip = (lambda name: model.checkpoint_name(name) in sources) if sources else (lambda name: False)
    for name, value in checkpoint_tensors(gguf, args.num_heads, args.num_kv_heads, skip=skip):
        yield name, functools.partial(_same, value), _rows_of(value)


def _block_rows(matrix: BlockMatrix) -> Callable[[int, int], torch.Tensor]:
    return lambda start, stop: torch.from_numpy(
        np.ascontiguousarray(row_slice(matrix, start, stop).dequantize())
    )


def _same(value: torch.Tensor) -> torch.Tensor:
    return value


def _rows_of(value: torch.Tensor) -> Callable[[int, int], torch.Tensor]:
    return lambda start, stop: value[start:stop]


def _no_dense(name: str) -> Callable[[], torch.Tensor]:
    def refuse() -> torch.Tensor:
        raise ValueError(f"{name} is read as stored blocks and has no dense tensor here")

    return refuse


def _row_reader(handle: Any, name: str) -> Callable[[int, int], torch.Tensor]:
    """Rows [start, stop) of one checkpoint tensor, read alone from the memory-mapped file."""
    return lambda start, stop: handle.get_slice(name)[start:stop]


def _load_one(
    name: str,
    tensor: torch.Tensor,
    params: dict[str, torch.nn.Parameter],
    modules: dict[str, torch.nn.Module],
    model: DecoderForCausalLM,
) -> tuple[str, str]:
    """Copy one checkpoint tensor; return the (param, shard) it filled."""
    for fused, original, shard in model.stacked_params:
        marker = f".{original}."
        if marker not in name:
            continue
        fused_name = name.replace(marker, f".{fused}.")
        module = modules.get(fused_name.rpartition(".")[0])
        if not isinstance(module, ShardedLinear) or fused_name not in params:
            raise ValueError(f"checkpoint weight {name} has no matching parameter")
        module.load_shard(params[fused_name], shard, tensor)
        return fused_name, shard
    if name not in params:
        raise ValueError(f"checkpoint weight {name} has no matching parameter")
    param = params[name]
    if param.shape != tensor.shape:
        raise ValueError(
            f"weight {name}: checkpoint shape {tuple(tensor.shape)} != model {tuple(param.shape)}"
        )
    param.data.copy_(tensor)
    return name, ""
