"""Offline throughput: 64 prompts through LLMEngine vs Hugging Face generate (batched, left-padded, greedy).

Usage: python -m bench.offline [--num-prompts 64] [--max-tokens 64] [--device cpu] [--dtype float32]
Each system runs in its own subprocess so the peak RSS figures do not mix.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.prompts import chat_prompt_ids


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    from inference import EngineConfig, LLMEngine, SamplingParams

    # An explicit KV budget sized for this batch, so peak RSS compares with HF's dynamic cache.
    engine = LLMEngine(
        EngineConfig(
            model="default",
            dtype=args.dtype,
            device=args.device,
            max_model_len=512,
            max_num_seqs=args.num_prompts,
            kv_cache_memory_bytes=args.kv_cache_mib << 20,
        )
    )
    prompts = chat_prompt_ids(engine.tokenizer, args.num_prompts)
    params = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    engine.generate(prompts[:2], SamplingParams(temperature=0, max_tokens=2))  # warm-up
    started = time.perf_counter()
    outputs = engine.generate(prompts, params)
    elapsed = time.perf_counter() - started
    generated = sum(len(o.outputs[0].token_ids) for o in outputs)
    return {
        "system": "mooncake LLMEngine",
        "seconds": elapsed,
        "generated": generated,
        "prompt_tokens": sum(map(len, prompts)),
        "peak_rss_mib": peak_rss_mib(),
        "model_dir": str(_checkpoint_dir(engine.loaded)),
    }


def _checkpoint_dir(loaded: Any) -> Path:
    """A folder transformers loads: a GGUF read as stored blocks has only config and tokenizer in its cache
    folder, so the dequantized checkpoint is written beside them first."""
    if any(Path(loaded.model_dir).glob("*.safetensors")):
        return Path(loaded.model_dir)
    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.load import DEFAULT_CACHE_DIR
    from inference.models.loader.source import resolve_source

    return ensure_converted(resolve_source(loaded.source), DEFAULT_CACHE_DIR)


def run_hf(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.dtype]
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=dtype).to(args.device).eval()
    prompts = chat_prompt_ids(tokenizer, args.num_prompts)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    width = max(map(len, prompts))
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=args.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=args.device)
    with torch.inference_mode():
        model.generate(ids[:2], attention_mask=mask[:2], do_sample=False, max_new_tokens=2, pad_token_id=pad)
        started = time.perf_counter()
        out = model.generate(
            ids,
            attention_mask=mask,
            do_sample=False,
            max_new_tokens=args.max_tokens,
            min_new_tokens=args.max_tokens,
            pad_token_id=pad,
        )
        elapsed = time.perf_counter() - started
    generated = int((out[:, width:] != -1).sum())
    return {
        "system": "HF generate (batched)",
        "seconds": elapsed,
        "generated": generated,
        "prompt_tokens": sum(map(len, prompts)),
        "peak_rss_mib": peak_rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--kv-cache-mib", type=int, default=512)
    parser.add_argument("--system", choices=["ours", "hf"])
    parser.add_argument("--model-dir")
    args = parser.parse_args()
    if args.system:
        print(json.dumps(run_ours(args) if args.system == "ours" else run_hf(args)))
        return
    base = [
        sys.executable,
        "-m",
        "bench.offline",
        "--num-prompts",
        str(args.num_prompts),
        "--max-tokens",
        str(args.max_tokens),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
    ]
    root = Path(__file__).resolve().parents[1]
    ours = _child([*base, "--system", "ours"], root)
    hf = _child([*base, "--system", "hf", "--model-dir", ours["model_dir"]], root)
    print(f"\n{args.num_prompts} prompts x {args.max_tokens} new tokens, greedy, {args.device}/{args.dtype}")
    print(f"{'system':<24}{'seconds':>9}{'gen tok/s':>11}{'peak RSS MiB':>14}")
    for row in (ours, hf):
        rate = row["generated"] / row["seconds"]
        print(f"{row['system']:<24}{row['seconds']:>9.2f}{rate:>11.1f}{row['peak_rss_mib']:>14.0f}")
    ratio = (ours["generated"] / ours["seconds"]) / (hf["generated"] / hf["seconds"])
    print(f"speed-up vs HF: {ratio:.2f}x")


def _child(command: list[str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


if __name__ == "__main__":
    main()
