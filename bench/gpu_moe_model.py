"""GPU check of a mixture-of-experts model through our engine: a random Qwen3-MoE-shaped checkpoint in bf16
on CUDA, its experts through the fused Triton kernel (moe_triton.py), against transformers' own model of
the same weights on the same device; then our engine's throughput on it.

    python -m bench.gpu_moe_model            # needs CUDA; about a minute on an H200
    python -m bench.gpu_moe_model --smoke    # a tiny shape on CPU (the per-expert path): the plumbing only

Prints the largest logit difference over three prompts relative to the logits' scale (bf16 rounding and
the kernels' order of summation: expect about 1e-2), how many of 64 greedy tokens agree with transformers'
generate, and output tokens/s at 16 concurrent requests.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

SHAPE = {
    "hidden_size": 1024,
    "num_hidden_layers": 8,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "num_experts": 32,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 512,
    "intermediate_size": 2048,
    "vocab_size": 4096,
    "norm_topk_prob": True,
}
SMOKE = {
    **SHAPE,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
}


def build(folder: Path, shape: dict[str, object]) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from inference.models.gguf_convert import ensure_converted
    from inference.models.loader import default_gguf_path

    config = AutoConfig.for_model("qwen3_moe", **shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(
                1.0 + 0.1 * torch.randn_like(param) if "norm" in name else 0.05 * torch.randn_like(param)
            )
    model.save_pretrained(folder)
    tokenizer = ensure_converted(default_gguf_path(), Path("var/cache"))
    for file in tokenizer.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens")):
            (folder / file.name).write_bytes(file.read_bytes())


def main(argv: list[str]) -> int:
    smoke = "--smoke" in argv
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    from transformers import AutoModelForCausalLM

    from inference import EngineConfig, LLMEngine, SamplingParams
    from inference.core.model_io import ScheduledChunk
    from inference.core.model_runner import ModelRunner
    from inference.models.loader import load_model
    from inference.models.moe import SparseMoE

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build(folder, SMOKE if smoke else SHAPE)
        dtype = torch.float32 if smoke else torch.bfloat16
        loaded = load_model(str(folder), dtype=str(dtype).removeprefix("torch."), device=device)
        reference = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
        gen = torch.Generator().manual_seed(1)
        prompts = [torch.randint(3, 4000, (n,), generator=gen).tolist() for n in (7, 90, 300)]
        runner = ModelRunner(
            loaded,
            block_size=16,
            max_num_seqs=4,
            max_num_batched_tokens=512,
            max_model_len=None,
            kv_cache_memory_bytes=64 << 20,
            gpu_memory_utilization=0.9,
        )
        worst = 0.0
        for ids in prompts:
            out = runner.execute([ScheduledChunk(ids, 0, len(ids), list(range(-(-len(ids) // 16))), True)])
            with torch.no_grad():
                theirs = reference(torch.tensor([ids], device=device)).logits[0].float()
            ours = out.all_positions[0].float().to(device)
            worst = max(worst, ((ours - theirs).abs().max() / theirs.abs().max()).item())
        fused = [m._stacked is not None for m in loaded.model.modules() if isinstance(m, SparseMoE)]
        print(f"prefill logits vs transformers: max |diff| / max |logit| = {worst:.2e}")
        print(f"MoE layers on the fused kernel: {sum(fused)} of {len(fused)}")
        if worst > (1e-4 if smoke else 5e-2):
            failures.append(f"logits differ by {worst:.2e}")
        if not smoke and not all(fused):
            failures.append("some MoE layers did not take the fused kernel")
        config = EngineConfig(
            model=str(folder),
            dtype=str(dtype).removeprefix("torch."),
            device=device,
            max_model_len=1024,
            kv_cache_memory_bytes=1 << 30,
        )
        engine = LLMEngine(config, loaded=loaded)
        greedy = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
        (ours_tokens,) = engine.generate([prompts[1]], greedy)
        ids = torch.tensor([prompts[1]], device=device)
        with torch.no_grad():
            hf = reference.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=64,
                min_new_tokens=64,
                pad_token_id=0,
            )[0, ids.shape[1] :].tolist()
        mine = list(ours_tokens.outputs[0].token_ids)
        agree = next((i for i, (a, b) in enumerate(zip(mine, hf, strict=True)) if a != b), len(hf))
        print(f"greedy tokens agreeing with transformers before the first difference: {agree} of 64")
        batch = [prompts[i % 3] for i in range(16)]
        started = time.perf_counter()
        outs = engine.generate(batch, SamplingParams(temperature=0, max_tokens=128, ignore_eos=True))
        elapsed = time.perf_counter() - started
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        print(f"our engine, 16 concurrent requests x 128 tokens: {tokens / elapsed:.0f} output tok/s")
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
