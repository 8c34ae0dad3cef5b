"""The two in-process scorers of bench/perplexity.py, each run in a child process of its own (the CPU
kernels' facts are probed once per process, and the settings differ per run): our engine's prompt
logprobs, and transformers' fp32 forward pass over the file dequantized by our converter.

Both return the log-probability of every token of every window (position 0 of a window, which has no
context, as 0.0) so the parent scores them with perplexity_windows exactly as llama-perplexity does.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.perplexity_windows import windows

# An engine setting's name -> the EngineConfig fields it changes from the defaults.
SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    # Steps of at most 16 rows: on AVX-512 without AMX the default keeps a dense bf16 copy for larger
    # batches (prompts), so only this measures the blocks that decoding reads.
    "default-16rows": {"max_num_batched_tokens": 16, "max_num_seqs": 16},
    # The AVX2 path, fp32 over the file's blocks, as shipped: int8 activations for Q4/Q8_0 blocks, 14 bits
    # for K-quants (kquant_activations "auto").
    "avx2": {"cpu_isa": "avx2"},
    "avx2-int16": {"cpu_isa": "avx2", "kquant_activations": "int16"},  # 14 bits for every type
    "avx2-int8": {"cpu_isa": "avx2", "kquant_activations": "int8"},  # llama.cpp's activation numerics
    "dense-fp32": {"dtype": "float32"},  # an explicit float32 keeps dense dequantized weights
}


def score_ours(model: Path, text: str, ctx: int, setting: str, threads: int) -> dict[str, Any]:
    from inference import EngineConfig, LLMEngine, SamplingParams

    engine = LLMEngine(
        EngineConfig(
            model=str(model),
            max_model_len=ctx + 1,  # the window and the one token generate() must produce
            cpu_threads=threads,
            kv_cache_memory_bytes=1 << 30,
            **SETTINGS[setting],
        )
    )
    loaded = engine.loaded
    tokens = engine.tokenizer.encode(text, add_special_tokens=False)
    spans = windows(len(tokens), ctx)
    prompts = [tokens[start:end] for start, end in spans]
    # prompt_logprobs=0: only the prompt token's own logprob (no top-k), which is all perplexity needs.
    params = SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    started = time.perf_counter()
    outputs = engine.generate(prompts, params)
    seconds = time.perf_counter() - started
    logprobs = []
    for out in outputs:
        entries = out.prompt_logprobs or []
        if len(entries) != ctx:
            raise RuntimeError(f"expected {ctx} prompt logprobs per window, got {len(entries)}")
        logprobs.append([0.0 if e is None else e[0].logprob for e in entries])
    path = "avx512 blocks" if loaded.avx512_kernels else "avx2 blocks" if loaded.avx2_kernels else "dense"
    return {
        "tokens": tokens,
        "logprobs": logprobs,
        "seconds": seconds,
        "path": f"{str(loaded.dtype).removeprefix('torch.')}, {path}",
    }


def score_reference(model: Path, text: str, ctx: int, threads: int) -> dict[str, Any]:
    """transformers in fp32 on our converter's dequantized copy (bit-exact to the GGUF's values for models
    this small: convert.py's FP32_MAX_ELEMENTS), trust_remote_code off."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.load import DEFAULT_CACHE_DIR

    torch.set_num_threads(threads)
    folder = ensure_converted(model, DEFAULT_CACHE_DIR)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, trust_remote_code=False).eval()
    tokens = tokenizer.encode(text, add_special_tokens=False)
    logprobs = []
    started = time.perf_counter()
    with torch.inference_mode():
        for start, end in windows(len(tokens), ctx):
            ids = torch.tensor([tokens[start:end]])
            rows = torch.log_softmax(hf(ids).logits[0].float(), dim=-1)  # row i predicts token i + 1
            chosen = rows[:-1].gather(1, ids[0, 1:, None])[:, 0]
            logprobs.append([0.0, *chosen.tolist()])
    return {
        "tokens": tokens,
        "logprobs": logprobs,
        "seconds": time.perf_counter() - started,
        "path": "transformers fp32",
    }
