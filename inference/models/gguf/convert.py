"""Convert a GGUF file once into a cached Hugging Face style safetensors directory.

The cache key is the file's sha256, so a renamed or copied file still hits the cache and an edited one
does not. Hashing a multi-GB file is slow, so a (path, size, mtime) -> hash memo sits beside the cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inference.cache_dir import ensure_private_dir, private_temp_file
from inference.models.gguf.architectures import ARCHITECTURES, GGUF_ARCHITECTURES
from inference.models.gguf.names import checkpoint_rows, checkpoint_tensors
from inference.models.gguf.reader import GGUFFile
from inference.progress import CONVERTING, CONVERTING_TENSORS, HASHING, Throttled, report

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

_HASH_MEMO = "hash-memo.json"
WEIGHTS = "model.safetensors"
FP32_MAX_ELEMENTS = 1_500_000_000  # above this many weights, dequantize to 16-bit instead of fp32

conversion_count = 0  # how many conversions this process ran; lets tests prove a cache hit


def file_sha256(path: Path, cache_dir: Path) -> str:
    """sha256 of `path`, memoized by (resolved path, size, mtime_ns) in `cache_dir`."""
    stat = path.stat()
    key = str(path.resolve())
    memo_path = cache_dir / _HASH_MEMO
    memo: dict[str, dict[str, object]] = {}
    if memo_path.is_file():
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}  # a corrupt memo only costs a rehash
    entry = memo.get(key)
    if entry and entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns:
        return str(entry["sha256"])
    digest = hashlib.sha256()
    hashed, progress = 0, Throttled(HASHING, stat.st_size)  # a multi-GB file takes a while: say so
    with path.open("rb") as f:
        while chunk := f.read(8 << 20):
            digest.update(chunk)
            hashed += len(chunk)
            progress(hashed)
    sha = digest.hexdigest()
    memo[key] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha}
    ensure_private_dir(cache_dir)
    tmp = private_temp_file(cache_dir, prefix=f".{_HASH_MEMO}-")
    try:
        tmp.write_text(json.dumps(memo, indent=1))
        tmp.replace(memo_path)
    finally:
        tmp.unlink(missing_ok=True)
    return sha


def ensure_converted(gguf_path: Path, cache_dir: Path, *, weights: bool = True) -> Path:
    """The cached HF directory for `gguf_path` (config and tokenizer), converting it first if this content
    was never seen. weights: also a dequantized safetensors copy of every tensor, for the paths that load a
    checkpoint (transformers' engine, dense weights); a native load that reads the file's blocks takes the
    other tensors straight from the GGUF (gguf_tensors) and asks for none."""
    gguf_cache = ensure_private_dir(cache_dir / "gguf")  # what is converted here is loaded as weights later
    sha = file_sha256(gguf_path, gguf_cache)
    target = gguf_cache / sha[:32]
    if (target / "config.json").is_file():
        if weights and not (target / WEIGHTS).is_file():
            _add_weights(gguf_path, target)
        logger.info("Reusing converted GGUF %s from %s", gguf_path.name, target)
        return target
    logger.info("Converting GGUF %s (sha256 %s) into %s", gguf_path.name, sha[:12], target)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f".{sha[:12]}-", dir=gguf_cache))
    try:
        _convert(gguf_path, tmp)
        if weights:
            _write_weights(GGUFFile(gguf_path), tmp / WEIGHTS)
        try:
            tmp.rename(target)  # atomic: readers see either nothing or a complete directory
        except OSError:
            if not (target / "config.json").is_file():
                raise
            logger.info("Another process converted %s concurrently; using its result", gguf_path.name)
            if weights and not (target / WEIGHTS).is_file():
                _add_weights(gguf_path, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    global conversion_count
    conversion_count += 1
    logger.info("Converted %s in %.1fs", gguf_path.name, time.monotonic() - started)
    return target


def _add_weights(gguf_path: Path, target: Path) -> None:
    """The dequantized weights into a directory converted without them (renamed in whole: atomic)."""
    logger.info("Writing the dequantized weights of %s into %s", gguf_path.name, target)
    tmp = private_temp_file(target, prefix=".weights-")
    try:
        _write_weights(GGUFFile(gguf_path), tmp)
        tmp.replace(target / WEIGHTS)
    finally:
        tmp.unlink(missing_ok=True)


def _write_weights(gguf: GGUFFile, path: Path) -> None:
    """Every checkpoint tensor into `path`, beside the converted config.json (for the head counts)."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((path.parent / "config.json").read_text())
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    num_elements = sum(t.n_elements for t in gguf.tensors)
    # Small models dequantize to fp32, bit-exact to the GGUF values (the CPU fp32 oracle depends on it);
    # large ones to 16 bits (what llama.cpp's GPU kernels compute with), or a 4 GB Q4 file would cache 28 GB.
    narrow = None if num_elements <= FP32_MAX_ELEMENTS else torch.float16
    tensors: dict[str, torch.Tensor] = {}
    # One checkpoint tensor per GGUF tensor, bar rare splits: the file's count is the progress total.
    progress = Throttled(CONVERTING_TENSORS, len(gguf.tensors))
    for name, tensor in checkpoint_tensors(gguf, heads, kv_heads, narrow=narrow):
        tensors[name] = tensor
        progress(min(len(tensors), len(gguf.tensors)))
    save_file(tensors, str(path), metadata={"format": "pt"})


def _convert(gguf_path: Path, out_dir: Path) -> None:
    """config.json, the tokenizer and a note of the source into out_dir."""
    from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerFast

    report(CONVERTING)
    gguf = GGUFFile(gguf_path)
    arch = gguf.architecture
    if arch not in GGUF_ARCHITECTURES:
        raise ValueError(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(sorted(GGUF_ARCHITECTURES))}"
        )
    # transformers' config and tokenizer loaders each parse the file with gguf-py's reader (seconds for a
    # large vocabulary), which is why this runs once per file content.
    record = ARCHITECTURES[arch]
    if record.own_config is not None:  # architectures transformers' GGUF config reader does not know
        config = record.own_config(gguf)
    else:
        config = AutoConfig.from_pretrained(
            gguf_path.parent, gguf_file=gguf_path.name, trust_remote_code=False
        )
        config.architectures = [record.hf_name]
        config = record.config(gguf, config)
    rows = checkpoint_rows(gguf, config.num_attention_heads, config.num_key_value_heads)
    # transformers' GGUF config mapping misses some keys (qwen3 attention.key_length, sometimes vocab_size);
    # the tensor shapes are the ground truth.
    config.head_dim = rows["model.layers.0.self_attn.q_proj.weight"] // config.num_attention_heads
    config.vocab_size = rows["model.embed_tokens.weight"]
    if "lm_head.weight" not in rows:
        config.tie_word_embeddings = True  # llama.cpp drops output.weight when it equals the embedding
    rope_freqs = gguf.tensor("rope_freqs.weight")
    if rope_freqs is not None:
        config.rope_parameters = _llama3_rope_from_factors(
            dict(getattr(config, "rope_parameters", None) or {}), config.head_dim, np.asarray(rope_freqs.data)
        )
    config.save_pretrained(out_dir)
    # The generic fast tokenizer reads any GGUF vocabulary; AutoTokenizer first asks for the config above.
    tokenizer_class = PreTrainedTokenizerFast if record.own_config is not None else AutoTokenizer
    tokenizer = tokenizer_class.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, trust_remote_code=False
    )
    tokenizer.save_pretrained(out_dir)
    (out_dir / "mooncake-source.json").write_text(json.dumps({"gguf": gguf_path.name, "architecture": arch}))


def _llama3_rope_from_factors(rope: dict[str, Any], head_dim: int, factors: np.ndarray) -> dict[str, Any]:
    """llama.cpp stores Llama 3.x rope scaling only as per-frequency divisors (rope_freqs); transformers
    ignores them. Every Llama 3.x release uses low 1 / high 4 / original 8192, so rebuild those parameters
    and check they reproduce the stored divisors exactly rather than guess silently."""
    import torch

    from inference.models.layers.rotary import inverse_frequencies

    rope = {**rope, "rope_type": "default"}
    rope.setdefault("rope_theta", 10000.0)
    base = inverse_frequencies(head_dim, rope)
    rope.update(
        rope_type="llama3",
        factor=float(factors.max()),
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    )
    expected = base / torch.from_numpy(factors.astype(np.float32).reshape(-1))
    if expected.shape != base.shape or not torch.allclose(
        inverse_frequencies(head_dim, rope), expected, rtol=1e-4
    ):
        raise ValueError(
            "GGUF rope_freqs do not match Llama 3 rope scaling; this rope variant is not supported"
        )
    return rope
