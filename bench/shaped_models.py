"""Models of real shapes with random weights, made by llama.cpp's own tools, so that our server and
llama-server read one file in the serving benchmarks (bench/compare.sh with BENCH_GGUF).

    python -m bench.shaped_models olmoe-1b-7b [--types bf16 Q4_K_M]   # prints each GGUF's path

A Hugging Face folder of the shape is written here (seeded random bf16 weights, std 0.02, norms 1; the
bundled model's tokenizer, which llama.cpp's converter knows), converted to a bf16 GGUF by llama.cpp's
convert_hf_to_gguf.py and quantized by its llama-quantize (both from bench/build_llama_server.sh). Files are
cached in bench/.models/<shape>/ (gitignored); the HF folder is removed once converted. Random routers
send tokens to experts about uniformly, so a MoE shape here reads more distinct experts per step than a
trained model's skewed routing would: the benchmark is of the kernels and the batching, not of routing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "bench" / ".llama-server"
MODELS = ROOT / "bench" / ".models"
SHARD_BYTES = 2 << 30
COMPLETE = ".complete"  # written last: a folder without it was cut short

SHAPES: dict[str, dict[str, Any]] = {
    # OLMoE-1B-7B-0924's body: 64 experts, 8 per token, 1.3B of 6.9B weights active.
    "olmoe-1b-7b": {
        "model_type": "olmoe",
        "hidden_size": 2048,
        "intermediate_size": 1024,
        "num_hidden_layers": 16,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "num_experts": 64,
        "num_experts_per_tok": 8,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    "llama-1b": {  # Llama-3.2-1B's body
        "model_type": "llama",
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": True,
    },
    "llama-8b": {  # Llama-3.1-8B's body
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
}


def write_hf_folder(shape: str, folder: Path, seed: int = 0) -> None:
    """config.json, the bundled tokenizer and seeded random bf16 safetensors shards of `shape`."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.source import default_gguf_path

    tokenizer_dir = ensure_converted(default_gguf_path(), ROOT / "var" / "cache")
    options = dict(SHAPES[shape])
    source = AutoConfig.from_pretrained(tokenizer_dir)
    ids = {k: getattr(source, k) for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
    config = AutoConfig.for_model(options.pop("model_type"), vocab_size=source.vocab_size, **ids, **options)
    config.torch_dtype = "bfloat16"
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    folder.mkdir(parents=True, exist_ok=True)
    config.architectures = [type(model).__name__]  # what llama.cpp's converter picks its model class by
    config.save_pretrained(folder)
    for file in tokenizer_dir.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            shutil.copy(file, folder / file.name)
    gen = torch.Generator().manual_seed(seed)

    def make(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if "norm" in name:
            return torch.ones(shape, dtype=torch.bfloat16)
        return (torch.randn(shape, generator=gen) * 0.02).to(torch.bfloat16)

    shard: dict[str, torch.Tensor] = {}
    size, index = 0, 0
    entries = [(n, e) for name, p in model.named_parameters() for n, e in checkpoint_entries(name, p.shape)]
    for position, (name, shape) in enumerate(entries):
        shard[name] = make(name, shape)
        size += shard[name].numel() * 2
        if size >= SHARD_BYTES or position == len(entries) - 1:
            index += 1
            save_file(shard, str(folder / f"model-{index:05d}.safetensors"), metadata={"format": "pt"})
            shard, size = {}, 0
    (folder / COMPLETE).touch()


def checkpoint_entries(name: str, shape: Any) -> list[tuple[str, tuple[int, ...]]]:
    """A parameter's tensors as checkpoints (and llama.cpp's converter) name them: transformers 5 holds a
    layer's experts as 3-D gate_up_proj [E, 2I, H] and down_proj [E, H, I]; files have one per expert."""
    dims = tuple(int(d) for d in shape)
    if name.endswith("experts.gate_up_proj"):
        prefix, (experts, double, hidden) = name.removesuffix("gate_up_proj"), dims
        return [
            (f"{prefix}{e}.{part}.weight", (double // 2, hidden))
            for e in range(experts)
            for part in ("gate_proj", "up_proj")
        ]
    if name.endswith("experts.down_proj"):
        prefix, (experts, hidden, inner) = name.removesuffix("down_proj"), dims
        return [(f"{prefix}{e}.down_proj.weight", (hidden, inner)) for e in range(experts)]
    return [(name, dims)]


def make(shape: str, types: list[str]) -> dict[str, Path]:
    """The GGUFs of `shape` in `types` (bf16 and llama-quantize's type names), made once."""
    out = MODELS / shape
    out.mkdir(parents=True, exist_ok=True)
    bf16 = out / f"{shape}-bf16.gguf"
    made = {t: out / f"{shape}-{t}.gguf" for t in types}
    if not bf16.exists() and any(not p.exists() for p in made.values()):
        folder = out / "hf"
        if not (folder / COMPLETE).exists():
            shutil.rmtree(folder, ignore_errors=True)
            write_hf_folder(shape, folder)
        env = {**os.environ, "PYTHONPATH": str(TOOLS / "convert" / "gguf-py")}
        converter = TOOLS / "convert" / "convert_hf_to_gguf.py"
        partial = bf16.with_suffix(".partial")
        subprocess.run(
            [sys.executable, str(converter), str(folder), "--outtype", "bf16", "--outfile", str(partial)],
            check=True,
            env=env,
        )
        partial.rename(bf16)
        shutil.rmtree(folder)
    for kind, path in made.items():
        if kind == "bf16" or path.exists():
            continue
        partial = path.with_suffix(".partial")
        quantize = TOOLS / "bin" / "llama-quantize"
        subprocess.run([str(quantize), str(bf16), str(partial), kind, str(os.cpu_count() or 1)], check=True)
        partial.rename(path)
    return made


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--types", nargs="+", default=["bf16", "Q4_K_M"])
    args = parser.parse_args()
    if not (TOOLS / "bin" / "llama-quantize").exists():
        sys.exit("llama.cpp's tools are missing: run bench/build_llama_server.sh first")
    for path in make(args.shape, args.types).values():
        print(path)


if __name__ == "__main__":
    main()
