"""GPU kernel check: Triton paged decode and KV store in bf16 against references, then decode attention
timed against the torch backend's gather + SDPA, with the bandwidth each reaches; the fused MoE kernels
against their per-expert reference (bench/gpu_moe.py).

    python -m bench.gpu_kernels          # needs CUDA and Triton; ~45 s on an H200
    python -m bench.gpu_kernels --moe    # the MoE section alone

Every timing is the median of `triton.testing.do_bench`; bandwidth counts the K/V bytes each decode row
must read once (its context), so the gather's extra traffic shows as a lower figure, not a higher one.
"""

from __future__ import annotations

import gc
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from bench.gpu_moe import check_moe
from inference.models.layers.attention import BatchLayout
from inference.models.layers.attention.torch_backend import TorchAttentionBackend
from inference.models.layers.attention.triton_backend import TritonAttentionBackend
from inference.models.layers.attention.triton_decode import num_splits, paged_decode, store_kv

BLOCK = 16
SHAPES = {"qwen3-0.6b": (16, 8, 128), "llama3-8b": (32, 8, 128), "smollm2-135m": (9, 3, 64)}


def reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, tables: list[list[int]], lens: list[int]
) -> torch.Tensor:
    rows = []
    for b, n in enumerate(lens):
        blocks = torch.tensor(tables[b][: -(-n // BLOCK)], device=q.device)
        k = k_cache[blocks].flatten(0, 1)[:n].float()
        v = v_cache[blocks].flatten(0, 1)[:n].float()
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        scores = torch.einsum("hd,nhd->hn", q[b].float(), k) * q.shape[-1] ** -0.5
        rows.append(torch.einsum("hn,nhd->hd", scores.softmax(-1), v))
    return torch.stack(rows)


def make_case(shape: tuple[int, int, int], lens: list[int], seed: int) -> dict[str, Any]:
    heads, kv_heads, dim = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    blocks_needed = sum(-(-n // BLOCK) for n in lens)
    num_blocks = blocks_needed + 8
    k_cache = torch.randn(
        num_blocks, BLOCK, kv_heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen
    )
    v_cache = torch.randn_like(k_cache)
    perm = torch.randperm(num_blocks, device="cuda", generator=gen).tolist()
    tables, start = [], 0
    for n in lens:
        tables.append(perm[start : start + -(-n // BLOCK)])
        start += len(tables[-1])
    width = max(len(t) for t in tables)
    table = torch.zeros(len(lens), width, dtype=torch.int32)
    for row, blocks in enumerate(tables):
        table[row, : len(blocks)] = torch.tensor(blocks)
    q = torch.randn(len(lens), heads, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    return {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "tables": tables,
        "table": table.to("cuda"),
        "lens": lens,
        "lengths": torch.tensor(lens, dtype=torch.int32, device="cuda"),
    }


def check_correctness() -> list[str]:
    failures = []
    print("| shape | context lengths | splits | rel. error vs fp32 |")
    print("|---|---|---:|---:|")
    for name, shape in SHAPES.items():
        for lens in ([1, 17, 1000, 4096], [300] * 64):
            case = make_case(shape, lens, seed=len(lens))
            expected = reference(case["q"], case["k_cache"], case["v_cache"], case["tables"], lens)
            for splits in sorted({1, num_splits(len(lens), shape[1], torch.device("cuda"), max(lens))}):
                out = paged_decode(
                    case["q"],
                    case["k_cache"],
                    case["v_cache"],
                    case["table"],
                    case["lengths"],
                    shape[2] ** -0.5,
                    splits,
                )
                error = ((out.float() - expected).norm() / expected.norm()).item()
                ok = error < 1e-2 and torch.isfinite(out).all().item()
                label = f"{lens[:4]}" if len(lens) <= 4 else f"{len(lens)} x {lens[0]}"
                print(f"| {name} | {label} | {splits} | {error:.1e}{'' if ok else ' FAIL'} |")
                if not ok:
                    failures.append(f"{name} {label} splits={splits}: {error:.2e}")
    # The store: padding rows (-1) write nothing, real rows exactly their values.
    kv_heads, dim = 8, 128
    k_cache = torch.zeros(8, BLOCK, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.zeros_like(k_cache)
    k = torch.randn(4, kv_heads, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    store_kv(k, v, k_cache, v_cache, torch.tensor([5, -1, 40, 127], device="cuda"))
    flat = k_cache.view(-1, kv_heads, dim)
    written = flat.abs().sum(dim=(1, 2)).nonzero().flatten().tolist()
    if written != [5, 40, 127] or not torch.equal(flat[40], k[2]):
        failures.append(f"store_kv wrote slots {written}")
    print(f"\nstore_kv: slots written {written} (expected [5, 40, 127])")
    return failures


def median_ms(
    backend: TorchAttentionBackend, case: dict[str, Any], layout: BatchLayout, scale: float
) -> float:
    import triton.testing

    meta = backend.build_metadata(layout)
    q, k_cache, v_cache = case["q"], case["k_cache"], case["v_cache"]
    return float(
        triton.testing.do_bench(
            lambda: backend.decode(q, k_cache, v_cache, meta, scale), warmup=25, rep=100, return_mode="median"
        )
    )


def time_decode() -> None:
    print("\n| shape | batch x context | triton µs | GB/s | torch gather+SDPA µs | GB/s | speed-up |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in ("qwen3-0.6b", "llama3-8b"):
        _, kv_heads, dim = SHAPES[name]
        for batch, context in ((1, 1024), (1, 8192), (16, 1024), (64, 2048), (256, 1024)):
            case = make_case(SHAPES[name], [context] * batch, seed=batch)
            layout = BatchLayout(
                query_lens=[1] * batch,
                context_lens=[context] * batch,
                block_tables=case["tables"],
                slot_mapping=torch.zeros(batch, dtype=torch.int64, device="cuda"),
                block_size=BLOCK,
                device=torch.device("cuda"),
            )
            tri = median_ms(TritonAttentionBackend(kv_heads), case, layout, dim**-0.5)
            tor = median_ms(TorchAttentionBackend(), case, layout, dim**-0.5)
            data = 2 * batch * context * kv_heads * dim * 2  # K and V, bf16
            print(
                f"| {name} | {batch} x {context} | {tri * 1e3:.0f} | {data / tri / 1e6:.0f} "
                f"| {tor * 1e3:.0f} | {data / tor / 1e6:.0f} | {tor / tri:.1f}x |"
            )


def build_runner(shape: dict[str, Any], *, eager: bool) -> Any:
    """Our Qwen3-0.6B-shaped model with random bf16 weights straight on the GPU, behind a ModelRunner."""
    from transformers import Qwen3Config

    from inference.core.model_runner import ModelRunner
    from inference.models.architectures.qwen import Qwen3ForCausalLM
    from inference.models.loader.load import LoadedModel

    config = Qwen3Config(**shape)
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    loaded = LoadedModel(
        model=model,
        hf_config=config,
        tokenizer=None,  # type: ignore[arg-type]
        model_dir=Path("."),
        source="random",
        architecture="Qwen3ForCausalLM",
        dtype=torch.bfloat16,
        device=torch.device("cuda"),
        num_params=sum(p.numel() for p in model.parameters()),
        size_on_disk=0,
        context_length=config.max_position_embeddings,
        eos_token_ids=set(),
    )
    return ModelRunner(
        loaded,
        block_size=BLOCK,
        max_num_seqs=256,
        max_num_batched_tokens=4096,
        max_model_len=2048,
        kv_cache_memory_bytes=None,
        gpu_memory_utilization=0.5,
        enforce_eager=eager,
    )


def time_steps(context: int = 512) -> None:
    """A whole decode step (inputs up, forward, LM head) eager vs replayed from a CUDA graph."""
    import time

    from bench.gpu_check.zoo import SHAPES as MODEL_SHAPES
    from inference.core.model_io import ScheduledChunk

    shape = {k: v for k, v in MODEL_SHAPES["qwen3-0.6b"].items() if k != "kind"}
    results: dict[str, dict[int, float]] = {}
    logits: dict[str, torch.Tensor] = {}
    for label, eager in (("eager", True), ("graphs", False)):
        runner = build_runner(shape, eager=eager)
        per_seq = -(-context // BLOCK)
        results[label] = {}
        for batch in (1, 8, 64, 256):
            chunks = [
                ScheduledChunk([7] * context, context - 1, 1, list(range(i * per_seq, (i + 1) * per_seq)))
                for i in range(batch)
            ]
            for _ in range(3):
                runner.execute(chunks)
            torch.cuda.synchronize()
            started = time.perf_counter()
            for _ in range(20):
                out = runner.execute(chunks).last
            torch.cuda.synchronize()
            results[label][batch] = (time.perf_counter() - started) / 20 * 1e3
            if batch == 8:
                logits[label] = out.float().cpu()
        print(f"{label}: graph sizes {runner.cuda_graph_sizes or 'none'}", flush=True)
        del runner
        gc.collect()
        torch.cuda.empty_cache()
    diff = (logits["eager"] - logits["graphs"]).abs().max().item()
    print(f"\n### Decode step, Qwen3-0.6B shape, bf16, context {context}")
    print(f"max |logit difference| eager vs graphs at batch 8: {diff:.3g}\n")
    print("| batch | eager ms | graphs ms | speed-up |\n|---:|---:|---:|---:|")
    for batch, eager_ms in results["eager"].items():
        graph_ms = results["graphs"][batch]
        print(f"| {batch} | {eager_ms:.2f} | {graph_ms:.2f} | {eager_ms / graph_ms:.2f}x |")


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr)
        return 2
    print(f"## Triton paged decode on {torch.cuda.get_device_name()}\n")
    failures: list[str] = []
    sections = (check_moe,) if "--moe" in argv else (check_correctness, time_decode, check_moe, time_steps)
    for section in sections:
        try:
            failures += section() or []
        except Exception:  # report and go on: one device run has to tell us as much as it can
            traceback.print_exc()
            failures.append(f"{section.__name__} crashed")
        sys.stdout.flush()
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
