"""The model files and the llama.cpp side of bench/perplexity.py: an f32 GGUF dequantized from the bundled
Q4_1 file (the model's true f16 weights cannot be fetched offline), requantizations of it made by
`llama-quantize`, and `llama-perplexity`'s result and token stream.

The f32 file keeps the source's metadata (tokenizer, rope, norms) byte for byte and only widens its
tensors, so the requantized files tokenize and compute exactly as the bundled one does; going through a
HF folder and convert_hf_to_gguf.py instead would re-derive the tokenizer and risk a different one.
"""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
LLAMA_BIN = ROOT / "bench" / ".llama-server" / "bin"
FILE_TYPE_F32 = 0  # llama_ftype LLAMA_FTYPE_ALL_F32
_FINAL = re.compile(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)")


def dequantize_to_f32(source: Path, target: Path) -> Path:
    """`target`: `source` with every tensor dequantized to F32 (the values llama.cpp itself decodes)."""
    import gguf

    if target.is_file():
        return target
    reader = gguf.GGUFReader(str(source))
    tmp = target.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(tmp), arch=str(reader.fields["general.architecture"].contents()))
    for key, field in reader.fields.items():
        # The writer writes the GGUF header and the architecture itself; the file type changes.
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key == "general.file_type":
            writer.add_uint32(key, FILE_TYPE_F32)
            continue
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, field.contents(), field.types[0], sub_type)
    for tensor in reader.tensors:
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, values, raw_dtype=gguf.GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(target)
    return target


def quantize(source: Path, target: Path, kind: str, threads: int) -> Path:
    """`llama-quantize source target KIND` (cached by name)."""
    if not target.is_file():
        tmp = target.with_suffix(".partial")
        cmd = [str(LLAMA_BIN / "llama-quantize"), str(source), str(tmp), kind, str(threads)]
        subprocess.run(cmd, check=True, capture_output=True)
        tmp.replace(target)
    return target


def tensor_types(path: Path) -> dict[str, int]:
    """How many tensors of each GGML type a file holds (a K-quant mix falls back on rows of 576)."""
    import gguf

    counts: dict[str, int] = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        counts[tensor.tensor_type.name] = counts.get(tensor.tensor_type.name, 0) + 1
    return counts


def llama_perplexity(
    model: Path, text: Path, ctx: int, threads: int, scratch: Path
) -> tuple[float, float, list[int]]:
    """llama-perplexity's (ppl, +/-) on `text` with context `ctx`, and the tokens it scored. The tokens come
    from the logits file that --kl-divergence-base writes (its header holds them), so the caller can prove
    both tools read the same token stream; the file is deleted after."""
    logits = scratch / "llama-logits.bin"
    cmd = [
        str(LLAMA_BIN / "llama-perplexity"), "-m", str(model), "-f", str(text), "-c", str(ctx),
        "-b", str(ctx), "-t", str(threads), "--kl-divergence-base", str(logits),
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    try:
        found = _FINAL.search(done.stdout + done.stderr)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"llama-perplexity failed ({done.returncode}): {done.stderr[-2000:]}")
        return float(found.group(1)), float(found.group(2)), _logits_file_tokens(logits)
    finally:
        logits.unlink(missing_ok=True)


def _logits_file_tokens(path: Path) -> list[int]:
    """The token ids in a llama-perplexity logits file: "_logits_", n_ctx (i32), n_vocab (i32), n_chunk
    (i32), then n_chunk * n_ctx token ids (i32); the log-probabilities follow and are not read."""
    with path.open("rb") as f:
        if f.read(8) != b"_logits_":
            raise ValueError(f"{path} is not a llama-perplexity logits file")
        n_ctx, _n_vocab, n_chunk = struct.unpack("<iii", f.read(12))
        return list(np.frombuffer(f.read(4 * n_ctx * n_chunk), dtype="<i4").tolist())
