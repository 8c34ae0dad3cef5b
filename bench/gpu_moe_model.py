"""GPU check of a mixture-of-experts model through our engine: a random Qwen3-MoE-shaped checkpoint in bf16
on CUDA, its experts through the fused Triton kernel (layers/moe/fused_experts.py), against transformers' own
model of the same weights on the same device; then our engine's throughput on it.

    python -m bench.gpu_moe_model            # needs CUDA; about a minute on an H200
    python -m bench.gpu_moe_model --smoke    # a tiny shape on CPU (the per-expert path): the plumbing only
    python -m bench.gpu_moe_model --tokenizer DIR   # tokenizer files from DIR (default: the bundled model's)

Prints the largest logit difference over three prompts relative to the logits' scale (bf16 rounding and
the kernels' order of summation: expect about 1e-2), how many of 64 greedy tokens agree with transformers'
generate, and output tokens/s at 16 concurrent requests.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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


def build(folder: Path, shape: dict[str, object], tokenizer: Path | None) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from inference.models.gguf.convert import ensure_converted
    from inference.models.loader.source import default_gguf_path

    config = AutoConfig.for_model("qwen3_moe", **shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(
                1.0 + 0.1 * torch.randn_like(param) if "norm" in name else 0.05 * torch.randn_like(param)
            )
    model.save_pretrained(folder)
    tokenizer = tokenizer or ensure_converted(default_gguf_path(), Path("var/cache"))
    for file in tokenizer.iterdir():
        if file.name.startswith(("tokenizer", "special_tokens")):
            (folder / file.name).write_bytes(file.read_bytes())


def main(argv: list[str]) -> int:
    smoke = "--smoke" in argv
    device = "cpu" if smoke else "cuda"
    if not smoke and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    from inference.models.layers.linear.moe import layer as moe
    from transformers import AutoModelForCausalLM

    from inference import EngineConfig, LLMEngine, SamplingParams
    from inference.core.model_io import ScheduledChunk
    from inference.core.model_runner import ModelRunner
    from inference.models.layers.moe.layer import SparseMoE
    from inference.models.loader.load import load_model

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        given = argv[argv.index("--tokenizer") + 1] if "--tokenizer" in argv else None
        build(folder, SMOKE if smoke else SHAPE, Path(given) if given else None)
        gen = torch.Generator().manual_seed(1)
        prompts = [torch.randint(3, 4000, (n,), generator=gen).tolist() for n in (7, 90, 300)]

        def prefill(loaded: Any) -> list[torch.Tensor]:
            runner = ModelRunner(
                loaded,
                block_size=16,
                max_num_seqs=4,
                max_num_batched_tokens=512,
                max_model_len=None,
                kv_cache_memory_bytes=64 << 20,
                gpu_memory_utilization=0.9,
            )
            return [
                runner.execute([ScheduledChunk(ids, 0, len(ids), list(range(-(-len(ids) // 16))), True)])
                .all_positions[0]
                .float()
                .to(device)
                for ids in prompts
            ]

        def gap(ours: list[torch.Tensor], theirs: list[torch.Tensor]) -> tuple[float, float]:
            worst = max(
                ((a - b).abs().max() / b.abs().max()).item() for a, b in zip(ours, theirs, strict=True)
            )
            same = torch.cat(
                [(a.argmax(-1) == b.argmax(-1)).float() for a, b in zip(ours, theirs, strict=True)]
            )
            return worst, same.mean().item()

        # fp32: the router is exact, so only the kernels' arithmetic (TF32 dots on CUDA) differs.
        loaded = load_model(str(folder), dtype="float32", device=device)
        reference = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(device).eval()
        with torch.no_grad():
            theirs = [reference(torch.tensor([ids], device=device)).logits[0].float() for ids in prompts]
        worst, same = gap(prefill(loaded), theirs)
        fused = [m._stacked is not None for m in loaded.model.modules() if isinstance(m, SparseMoE)]
        print(
            f"fp32 prefill vs transformers: max |diff| / max |logit| = {worst:.2e}, argmax agrees {same:.1%}"
        )
        print(f"MoE layers on the fused kernel: {sum(fused)} of {len(fused)}")
        if worst > (1e-4 if smoke else 2e-2):
            failures.append(f"fp32 logits differ by {worst:.2e}")
        if not smoke and not all(fused):
            failures.append("some MoE layers did not take the fused kernel")
        engine = LLMEngine(
            EngineConfig(
                model=str(folder),
                dtype="float32",
                device=device,
                max_model_len=1024,
                kv_cache_memory_bytes=1 << 30,
            ),
            loaded=loaded,
        )
        (ours_tokens,) = engine.generate(
            [prompts[1]], SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
        )
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
        print(f"fp32 greedy tokens agreeing with transformers before the first difference: {agree} of 64")
        del engine, loaded, reference

        # bf16 is reported, not judged: the fused kernel rounds each token's expert sum once, the loop per
        # expert, and after a layer or two a router near-tie among the experts falls the other way for some
        # tokens, which moves their logits far (measured on the H200: 0.25 of the logit scale, argmax 93%
        # fused vs loop; 89.9% vs transformers' bf16 model). fp32 above is the oracle.
        dtype = "float32" if smoke else "bfloat16"
        loaded = load_model(str(folder), dtype=dtype, device=device)
        fused_logits = prefill(loaded)
        stacked = moe.SparseMoE.stacked_experts
        moe.SparseMoE.stacked_experts = lambda self, x: None  # type: ignore[method-assign]
        try:
            loop_logits = prefill(loaded)
        finally:
            moe.SparseMoE.stacked_experts = stacked  # type: ignore[method-assign]
        worst, same = gap(fused_logits, loop_logits)
        print(f"{dtype} fused kernel vs per-expert loop: max rel diff {worst:.2e}, argmax {same:.1%}")
        if smoke and worst > 1e-4:
            failures.append(f"fused vs loop differ by {worst:.2e}")
        reference = (
            AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()
        )
        with torch.no_grad():
            theirs = [reference(torch.tensor([ids], device=device)).logits[0].float() for ids in prompts]
        worst, same = gap(fused_logits, theirs)
        print(f"{dtype} vs transformers {dtype}: max rel diff {worst:.2e}, argmax agrees {same:.1%}")
        engine = LLMEngine(
            EngineConfig(
                model=str(folder),
                dtype=dtype,
                device=device,
                max_model_len=1024,
                kv_cache_memory_bytes=1 << 30,
            ),
            loaded=loaded,
        )
        batch = [prompts[i % 3] for i in range(16)]
        started = time.perf_counter()
        outs = engine.generate(batch, SamplingParams(temperature=0, max_tokens=128, ignore_eos=True))
        elapsed = time.perf_counter() - started
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        print(
            f"our engine ({dtype}), 16 concurrent requests x 128 tokens: {tokens / elapsed:.0f} output tok/s"
        )
    if failures:
        print("FAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
