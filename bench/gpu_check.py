"""GPU check: correctness oracle and offline throughput of LLMEngine vs Hugging Face continuous batching.

    python -m bench.gpu_check [--models qwen3-0.6b,llama3-8b] [--num-prompts 256] [--budget-s 450]
    python -m bench.gpu_check --smoke        # tiny config on CPU: checks the plumbing in seconds

Needs no network and no files: each model is built from a config with seeded random weights, saved as
safetensors (with a generated word-level tokenizer) to a temporary directory, and that directory is what
both sides load, so the oracle compares like with like.

1. Oracle: greedy tokens of ours vs HF `generate` for a few prompts. A divergence where HF's logits of the
   two candidates are within `--tie-tol` is reported as a tie (bf16 rounding), not a failure.
2. Throughput: `--num-prompts` prompts of random token ids (input 100-1024, output 100-1024, ignore_eos),
   ours (LLMEngine) vs HF's ContinuousBatchingManager, one after the other on the same device, with peak
   allocated memory. Each throughput run has a deadline carved from `--budget-s`; a run cut short says so.
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import random
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": {
        "kind": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "llama3-8b": {
        "kind": "llama",
        "vocab_size": 128256,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 8192,
        "rope_theta": 500_000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    },
    # --smoke: small enough for a CPU in seconds, still GQA and untied.
    "tiny-llama": {
        "kind": "llama",
        "vocab_size": 512,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 2048,
        "rope_theta": 10_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
}


@dataclass
class Settings:
    device: str
    dtype: str
    num_prompts: int
    input_len: tuple[int, int]
    output_len: tuple[int, int]
    oracle_prompts: int
    oracle_tokens: int
    tie_tol: float
    budget_s: float
    gpu_memory_utilization: float
    seed: int


@dataclass
class Throughput:
    system: str
    seconds: float = 0.0
    requests_done: int = 0
    requests: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    peak_mem_mib: float = 0.0
    note: str = ""

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0


@dataclass
class ModelReport:
    name: str
    oracle: list[str] = field(default_factory=list)
    oracle_failed: bool = False
    runs: list[Throughput] = field(default_factory=list)
    build_s: float = 0.0


# ---- building a model directory -------------------------------------------------------------------------


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def word_tokenizer(vocab_size: int, eos_id: int) -> Any:
    """A word-level tokenizer over `t0 .. t{n-1}`: prompts are token ids anyway, and it needs no download."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=f"t{eos_id}", pad_token=f"t{eos_id}", unk_token="t0"
    )


def build_model(name: str, out_dir: Path, settings: Settings) -> Any:
    """Seeded random weights in the target dtype and device; saved to out_dir; returns the HF model."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    shape = dict(SHAPES[name])
    kind = shape.pop("kind")
    config_cls, model_cls = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    }[kind]
    eos_id = shape["vocab_size"] - 1
    config = config_cls(**shape, bos_token_id=1, eos_token_id=eos_id, pad_token_id=eos_id)
    torch.manual_seed(settings.seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch_dtype(settings.dtype))  # initialize directly in the final dtype
    try:
        with torch.device(settings.device):
            model = model_cls(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.eos_token_id = eos_id
    model.save_pretrained(out_dir)
    word_tokenizer(shape["vocab_size"], eos_id).save_pretrained(out_dir)
    return model


def make_prompts(settings: Settings, vocab_size: int) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(settings.seed)
    prompts = [
        [rng.randrange(2, vocab_size - 1) for _ in range(rng.randint(*settings.input_len))]
        for _ in range(settings.num_prompts)
    ]
    outputs = [rng.randint(*settings.output_len) for _ in range(settings.num_prompts)]
    return prompts, outputs


def oracle_prompts(settings: Settings, vocab_size: int) -> list[list[int]]:
    rng = random.Random(settings.seed + 7)
    lengths = [5, 33, 100, 257, 18, 64][: settings.oracle_prompts]
    return [[rng.randrange(2, vocab_size - 1) for _ in range(n)] for n in lengths]


# ---- memory ---------------------------------------------------------------------------------------------


def reset_peak(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (KiB on Linux)


# ---- Hugging Face side ----------------------------------------------------------------------------------


@torch.inference_mode()
def hf_greedy(model: Any, prompts: list[list[int]], max_new_tokens: int, eos_id: int) -> list[list[int]]:
    device = next(model.parameters()).device
    outputs = []
    for prompt in prompts:
        ids = torch.tensor([prompt], device=device)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_id,
            pad_token_id=eos_id,
        )
        outputs.append(out[0, len(prompt) :].tolist())
    return outputs


@torch.inference_mode()
def hf_logits(model: Any, token_ids: list[int]) -> torch.Tensor:
    device = next(model.parameters()).device
    return model(torch.tensor([token_ids], device=device)).logits[0, -1].float()


def cb_config(settings: Settings) -> Any:
    """HF sizes its cache from free memory: on a CPU that took ~14 GB for a tiny model; bound it."""
    from transformers import ContinuousBatchingConfig

    wanted: dict[str, Any] = {"max_memory_percent": settings.gpu_memory_utilization}
    if not settings.device.startswith("cuda"):
        longest = settings.input_len[1] + settings.output_len[1]
        wanted = {
            "page_size": 32,
            "num_blocks": settings.num_prompts * (longest // 32 + 2),
            "max_batch_tokens": 2048,
        }
    known = inspect.signature(ContinuousBatchingConfig).parameters
    return ContinuousBatchingConfig(**{k: v for k, v in wanted.items() if k in known})


def hf_throughput(
    model: Any, prompts: list[list[int]], outputs: list[int], settings: Settings, deadline: float
) -> Throughput:
    from transformers import GenerationConfig

    result = Throughput("HF ContinuousBatchingManager", requests=len(prompts))
    reset_peak(settings.device)
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(outputs), eos_token_id=-1, pad_token_id=0)
    manager = model.init_continuous_batching(
        generation_config=gen, continuous_batching_config=cb_config(settings)
    )
    accepts_eos = "eos_token_id" in inspect.signature(manager.add_request).parameters
    try:
        if hasattr(manager, "warmup") and not getattr(manager, "warmed_up", True):
            manager.warmup()
        manager.start()
        started = time.perf_counter()
        for i, (prompt, n) in enumerate(zip(prompts, outputs, strict=True)):
            extra = {"eos_token_id": -1} if accepts_eos else {}
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=n, **extra)
        while result.requests_done < len(prompts):
            if time.perf_counter() > deadline:
                result.note = "cut at the deadline: unfinished requests not counted"
                break
            out = manager.get_result(timeout=1)
            if out is None:
                if not manager.is_running():
                    result.note = "the manager stopped early"
                    break
                continue
            if out.is_finished():
                result.requests_done += 1
                result.output_tokens += len(out.generated_tokens)
                result.prompt_tokens += len(out.prompt_ids)
        result.seconds = time.perf_counter() - started
    finally:
        manager.stop(block=True, timeout=10)
        destroy = getattr(model, "destroy_cached_continuous_batching_manager", None)
        if destroy is not None:
            destroy()
    result.peak_mem_mib = peak_mib(settings.device)
    result.note = (result.note + f"; attn={getattr(model.config, '_attn_implementation', '?')}").lstrip("; ")
    return result


# ---- our side -------------------------------------------------------------------------------------------


def our_engine(model_dir: Path, settings: Settings, max_model_len: int, max_num_seqs: int) -> Any:
    from inference import EngineConfig, LLMEngine

    config = EngineConfig(
        model=str(model_dir),
        dtype=settings.dtype,
        device=settings.device,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(4096, settings.input_len[1]),
        gpu_memory_utilization=settings.gpu_memory_utilization,
    )
    return LLMEngine(config)


def our_greedy(engine: Any, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    from inference import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in engine.generate(prompts, params)]


def our_throughput(
    engine: Any, prompts: list[list[int]], outputs: list[int], settings: Settings, deadline: float
) -> Throughput:
    from inference import SamplingParams

    result = Throughput("ours LLMEngine", requests=len(prompts))
    engine.generate([prompts[0][:16]], SamplingParams(temperature=0.0, max_tokens=4))  # warm-up
    reset_peak(settings.device)
    generated: dict[str, int] = {}
    started = time.perf_counter()
    for i, (prompt, n) in enumerate(zip(prompts, outputs, strict=True)):
        params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
        engine.add_request(f"r{i}", prompt, params)
    while engine.has_unfinished_requests():
        if time.perf_counter() > deadline:
            result.note = "cut at the deadline: tokens so far counted"
            break
        for out in engine.step():
            generated[out.request_id] = len(out.outputs[0].token_ids)
            if out.finished:
                result.requests_done += 1
                result.prompt_tokens += len(out.prompt_token_ids)
    if settings.device.startswith("cuda"):
        torch.cuda.synchronize()
    result.seconds = time.perf_counter() - started
    result.output_tokens = sum(generated.values())
    result.peak_mem_mib = peak_mib(settings.device)
    runner = getattr(engine, "runner", None)
    if runner is not None:
        extra = f"kv={getattr(runner, 'kv_cache_bytes', 0) / 2**20:.0f} MiB"
        extra += f", attn={getattr(runner, 'attention_backend_name', '?')}"
        result.note = f"{result.note}; {extra}".lstrip("; ")
    for i in range(len(prompts)):  # anything cut short at the deadline
        engine.abort_request(f"r{i}")
    while engine.has_unfinished_requests():
        engine.step()
    return result


# ---- one model ------------------------------------------------------------------------------------------


def compare_tokens(
    ours: list[int], theirs: list[int], hf_model: Any, prompt: list[int], tie_tol: float, eos_id: int
) -> tuple[str, bool]:
    """(verdict, failed). HF stops at EOS while ours ignores it, so HF's output is compared as a prefix."""
    for j, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            logits = hf_logits(hf_model, prompt + theirs[:j])
            gap = float(logits[b] - logits[a])
            if abs(gap) <= tie_tol:
                return f"tie at token {j} (HF logit gap {gap:.4f} <= {tie_tol})", False
            return f"MISMATCH at token {j}: ours {a}, HF {b} (HF logit gap {gap:.4f})", True
    if len(theirs) < len(ours) and (not theirs or theirs[-1] != eos_id):
        return f"HF stopped after {len(theirs)} tokens without EOS", True
    return f"equal ({len(theirs)} tokens)", False


def run_model(name: str, settings: Settings, work: Path, deadline: float, phases_left: int) -> ModelReport:
    report = ModelReport(name)
    vocab = SHAPES[name]["vocab_size"]
    eos_id = vocab - 1
    model_dir = work / name
    started = time.perf_counter()
    hf_model = build_model(name, model_dir, settings)
    report.build_s = time.perf_counter() - started
    print(f"[{name}] built and saved in {report.build_s:.1f}s -> {model_dir}", flush=True)

    oracle_in = oracle_prompts(settings, vocab)
    hf_out = hf_greedy(hf_model, oracle_in, settings.oracle_tokens, eos_id)
    prompts, outputs = make_prompts(settings, vocab)

    def share() -> float:  # this phase's slice of what is left
        return time.perf_counter() + max(5.0, (deadline - time.perf_counter()) / max(1, phases_left))

    hf_run = hf_throughput(hf_model, prompts, outputs, settings, share())
    phases_left -= 1
    print(f"[{name}] HF: {hf_run.tok_s:.0f} output tok/s ({hf_run.note})", flush=True)

    longest_oracle = max(len(x) for x in oracle_in) + settings.oracle_tokens
    max_len = max(settings.input_len[1] + settings.output_len[1], longest_oracle) + 16
    engine = our_engine(
        model_dir, settings, max_model_len=max_len, max_num_seqs=min(256, settings.num_prompts)
    )
    ours_out = our_greedy(engine, oracle_in, settings.oracle_tokens)
    for i, (prompt, a, b) in enumerate(zip(oracle_in, ours_out, hf_out, strict=True)):
        verdict, failed = compare_tokens(a, b, hf_model, prompt, settings.tie_tol, eos_id)
        report.oracle.append(f"prompt {i} ({len(prompt)} tokens): {verdict}")
        report.oracle_failed |= failed
    del hf_model
    reset_peak(settings.device)
    ours_run = our_throughput(engine, prompts, outputs, settings, share())
    print(f"[{name}] ours: {ours_run.tok_s:.0f} output tok/s ({ours_run.note})", flush=True)
    report.runs = [ours_run, hf_run]
    del engine
    reset_peak(settings.device)
    shutil.rmtree(model_dir, ignore_errors=True)
    return report


def print_header(settings: Settings) -> None:
    print(f"\n## GPU check ({settings.device}, {settings.dtype}, {settings.num_prompts} prompts)\n")
    if settings.device.startswith("cuda"):
        print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}\n", flush=True)


def print_reports(reports: list[ModelReport], settings: Settings) -> None:
    for report in reports:
        print(f"### {report.name} (built in {report.build_s:.0f}s)")
        print("oracle: " + ("FAILED" if report.oracle_failed else "ok"))
        for line in report.oracle:
            print(f"  - {line}")
        memory = "peak allocated (MiB)" if settings.device.startswith("cuda") else "peak RSS (MiB)"
        print(f"\n| system | done/requests | seconds | output tok/s | total tok/s | {memory} | note |")
        print("|---|---:|---:|---:|---:|---:|---|")
        for run in report.runs:
            total = (run.output_tokens + run.prompt_tokens) / run.seconds if run.seconds else 0.0
            print(
                f"| {run.system} | {run.requests_done}/{run.requests} | {run.seconds:.1f} | {run.tok_s:.0f} "
                f"| {total:.0f} | {run.peak_mem_mib:.0f} | {run.note} |"
            )
        ours, hf = report.runs[0].tok_s, report.runs[1].tok_s if len(report.runs) > 1 else 0.0
        if hf:
            print(f"\nours/HF output tok/s: {ours / hf:.2f}")
        print()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, 8 short prompts")
    p.add_argument("--models", default="qwen3-0.6b,llama3-8b")
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget of the whole check")
    p.add_argument("--tie-tol", type=float, default=None, help="HF logit gap treated as a tie")
    # Not 0.9: without flash-attn our torch backend gathers each decode row's K/V (GBs at 256 x 2k tokens),
    # and that working set is not part of the engine's memory profiling step.
    p.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", dest="json_path", help="also write the reports as JSON")
    args = p.parse_args(argv)
    started = time.perf_counter()
    if args.smoke:
        models = ["tiny-llama"]
        settings = Settings(
            "cpu", "float32", 8, (10, 40), (10, 40), 4, 16, 1e-4, args.budget_s, 0.9, args.seed
        )
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run with --smoke for the CPU plumbing check", file=sys.stderr)
            return 2
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        unknown = [m for m in models if m not in SHAPES]
        if unknown:
            p.error(f"unknown models {unknown}; known: {', '.join(SHAPES)}")
        tie_tol = args.tie_tol if args.tie_tol is not None else (1e-3 if args.dtype == "float32" else 0.1)
        settings = Settings(
            "cuda",
            args.dtype,
            args.num_prompts,
            (100, 1024),
            (100, 1024),
            4,
            32,
            tie_tol,
            args.budget_s,
            args.gpu_memory_utilization,
            args.seed,
        )
    deadline = started + settings.budget_s
    reports = []
    with tempfile.TemporaryDirectory(prefix="mooncake-gpu-check-") as tmp:
        print_header(settings)
        for index, name in enumerate(models):
            phases_left = 2 * (len(models) - index)
            reports.append(run_model(name, settings, Path(tmp), deadline, phases_left))
            print_reports(reports[-1:], settings)  # now, in case a later model runs out of time
            sys.stdout.flush()
    print(f"total {time.perf_counter() - started:.0f}s")
    if args.json_path:
        data = [
            {
                "model": r.name,
                "oracle": r.oracle,
                "oracle_failed": r.oracle_failed,
                "runs": [dict(vars(run), tok_s=run.tok_s) for run in r.runs],
            }
            for r in reports
        ]
        Path(args.json_path).write_text(json.dumps(data, indent=1), encoding="utf-8")
    return 1 if any(r.oracle_failed for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
