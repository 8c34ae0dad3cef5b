"""Our engine on GGUFs of real models' shapes with random K-quant blocks: decode speed, prompt speed and
memory of the block kernels at the sizes people run, against the physical limit measured in the same run.

    python -m bench.kquant_shapes [--shape 1b] [--tokens 48] [--prompt 1000]

The file is written here with gguf-py (Q4_K_M's mix of types: Q4_K, with Q6_K for the output and some
attn_v/ffn_down), from random blocks with valid scales and the bundled model's tokenizer: no download and
no llama.cpp. It is not llama.cpp's converter or quantizer, so llama-server is not measured here (that is
bench/compare.sh's peer, on files llama.cpp's own tools make). Each measure runs in a fresh subprocess so
peak RSS figures do not mix. Reports: c=1 decode tok/s, c=16 output tok/s, a prompt's prefill tok/s, RSS
after load and peak, and the weights' bytes per token over the copy bandwidth (the single stream's limit).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = {  # (layers, hidden, heads, kv heads, intermediate, vocab)
    "1b": (16, 2048, 32, 8, 8192, 49152),  # Llama-3.2-1B's body; the bundled tokenizer's vocabulary
    "8b": (32, 4096, 32, 8, 14336, 49152),
}


def write_gguf(path: Path, shape: str, seed: int = 0) -> int:
    """A llama-architecture GGUF of `shape` with random Q4_K/Q6_K blocks; returns its size in bytes."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    from gguf.constants import GGMLQuantizationType as T

    from inference.models.loader.source import default_gguf_path
    from inference.models.quantization.gguf.formats import KQuantBlocks

    layers, hidden, heads, kv_heads, inter, vocab = SHAPES[shape]
    source = GGUFReader(default_gguf_path())
    writer = GGUFWriter(path, "llama")
    numbers = {
        "llama.block_count": layers,
        "llama.embedding_length": hidden,
        "llama.feed_forward_length": inter,
        "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv_heads,
        "llama.context_length": 8192,
        "llama.rope.dimension_count": hidden // heads,
    }
    for field in source.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture" or field.name in numbers:
            continue
        sub_type = field.types[-1] if field.types[0] == GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type)
    for key, value in numbers.items():
        writer.add_uint32(key, value)
    rng = np.random.default_rng(seed)
    head_dim = hidden // heads

    def blocks(name: str, rows: int, cols: int, kind: str) -> None:
        # Super-block scales small enough that random levels (weights up to d * 63 * 15) keep the
        # activations finite through every layer.
        data = KQuantBlocks.random(kind, rows, cols, seed=int(rng.integers(1 << 30)), scale=2e-5).raw
        writer.add_tensor(name, data, raw_shape=data.shape, raw_dtype=T[kind])

    blocks("token_embd.weight", vocab, hidden, "Q6_K")
    writer.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    for i in range(layers):
        more = i < layers // 8 or i >= 7 * layers // 8 or (i - layers // 8) % 3 == 2
        blocks(f"blk.{i}.attn_q.weight", heads * head_dim, hidden, "Q4_K")
        blocks(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden, "Q4_K")
        blocks(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden, "Q6_K" if more else "Q4_K")
        blocks(f"blk.{i}.attn_output.weight", hidden, heads * head_dim, "Q4_K")
        blocks(f"blk.{i}.ffn_gate.weight", inter, hidden, "Q4_K")
        blocks(f"blk.{i}.ffn_up.weight", inter, hidden, "Q4_K")
        blocks(f"blk.{i}.ffn_down.weight", hidden, inter, "Q6_K" if more else "Q4_K")
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.stat().st_size


def copy_bandwidth() -> float:
    """Bytes per second a large copy moves (read + write), on every core torch uses."""
    import torch

    a = torch.empty(1 << 29, dtype=torch.uint8)
    b = torch.empty_like(a)
    b.copy_(a)
    start = time.perf_counter()
    for _ in range(5):
        b.copy_(a)
    return 2 * a.numel() * 5 / (time.perf_counter() - start)


def measure(
    gguf: str,
    cache: str,
    tokens: int,
    prompt: int,
    dense_copy: bool | None,
    amx: bool,
    activations: str = "int16",
) -> dict[str, Any]:
    import psutil

    from inference import EngineConfig, LLMEngine, SamplingParams

    started = time.perf_counter()
    engine = LLMEngine(
        EngineConfig(
            model=gguf,
            dtype="bfloat16",
            device="cpu",
            cache_dir=cache,
            max_model_len=2048,
            max_num_seqs=16,
            kv_cache_memory_bytes=1 << 30,
            gguf_dense_copy=dense_copy,
            gguf_amx_decode=amx,
            kquant_activations=activations,
        )
    )
    loaded_s = time.perf_counter() - started
    rss_loaded = psutil.Process().memory_info().rss
    greedy = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    one = [[1 + i % 1000 for i in range(16)]]
    engine.generate(one, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))  # warm up
    start = time.perf_counter()
    engine.generate(one, greedy)
    c1 = tokens / (time.perf_counter() - start)
    many = [[1 + (i * 7 + j) % 1000 for j in range(16)] for i in range(16)]
    start = time.perf_counter()
    engine.generate(many, greedy)
    c16 = 16 * tokens / (time.perf_counter() - start)
    long_prompt = [[1 + (i * 13) % 1000 for i in range(prompt)]]
    start = time.perf_counter()
    engine.generate(long_prompt, SamplingParams(temperature=0, max_tokens=1, ignore_eos=True))
    prefill = prompt / (time.perf_counter() - start)
    return {
        "load_s": loaded_s,
        "c1_tok_s": c1,
        "c16_tok_s": c16,
        "prefill_tok_s": prefill,
        "rss_loaded_gb": rss_loaded / 1e9,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "bandwidth_gbs": copy_bandwidth() / 1e9,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--prompt", type=int, default=1000)
    parser.add_argument("--dense-copy", choices=["auto", "on", "off"], default="auto")
    parser.add_argument("--q4-amx", action="store_true", help="decoding rows through AMX tiles (q4_amx)")
    parser.add_argument(
        "--activations",
        choices=["int16", "int8", "bf16"],
        default="int16",
        help="how K-quant decoding rows meet the blocks (kquant_activations)",
    )
    parser.add_argument("--child", nargs=2, metavar=("GGUF", "CACHE"), help=argparse.SUPPRESS)
    parser.add_argument("--convert", nargs=2, metavar=("GGUF", "CACHE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    copy = {"auto": None, "on": True, "off": False}[args.dense_copy]
    if args.convert:  # once, in its own process: the measured one starts from a warm conversion cache
        from inference.models.gguf.convert import ensure_converted

        ensure_converted(Path(args.convert[0]), Path(args.convert[1]))
        return
    if args.child:
        result = measure(
            args.child[0], args.child[1], args.tokens, args.prompt, copy, args.q4_amx, args.activations
        )
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory(prefix="kquant-bench-") as work:
        gguf = Path(work) / f"random-{args.shape}-q4_k_m.gguf"
        size = write_gguf(gguf, args.shape)
        command = [
            sys.executable,
            "-m",
            "bench.kquant_shapes",
            "--shape",
            args.shape,
            "--tokens",
            str(args.tokens),
            "--prompt",
            str(args.prompt),
            "--dense-copy",
            args.dense_copy,
            *(["--q4-amx"] if args.q4_amx else []),
            "--activations",
            args.activations,
            "--child",
            str(gguf),
            str(Path(work) / "cache"),
        ]
        convert = [
            sys.executable,
            "-m",
            "bench.kquant_shapes",
            "--convert",
            str(gguf),
            str(Path(work) / "cache"),
        ]
        subprocess.run(convert, check=True, capture_output=True, text=True)
        out = subprocess.run(command, check=True, capture_output=True, text=True)
        result = json.loads(out.stdout.strip().splitlines()[-1])
    limit = result["bandwidth_gbs"] * 1e9 / 2 / size  # one read of the file per token, at half the copy rate
    amx = ", decoding rows on AMX tiles" if args.q4_amx else f", {args.activations} activations"
    print(f"{args.shape} Q4_K_M (random blocks), file {size / 1e9:.2f} GB, dense copy {args.dense_copy}{amx}")
    print(
        f"  load {result['load_s']:.0f} s, RSS after load {result['rss_loaded_gb']:.2f} GB, "
        f"peak {result['peak_rss_gb']:.2f} GB"
    )
    print(
        f"  c=1 decode {result['c1_tok_s']:.1f} tok/s (physical limit {limit:.1f}: the file once per token "
        f"at {result['bandwidth_gbs'] / 2:.1f} GB/s read), c=16 {result['c16_tok_s']:.1f} tok/s, "
        f"{args.prompt}-token prompt {result['prefill_tok_s']:.0f} tok/s"
    )


if __name__ == "__main__":
    main()
