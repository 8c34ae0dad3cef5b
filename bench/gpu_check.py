"""GPU check: correctness oracle and offline throughput of LLMEngine vs Hugging Face continuous batching.

    python -m bench.gpu_check [--models qwen3-0.6b,llama3-8b] [--num-prompts 256] [--budget-s 420]
    python -m bench.gpu_check --smoke        # tiny config on CPU: checks the plumbing in seconds

Needs no network and no files: each model is built from a config with seeded random weights, saved as
safetensors (with a generated word-level tokenizer) to a temporary directory, and that directory is what
both sides load, so the oracle compares like with like. Works with transformers 5.17 (the GPU machine's)
and 5.24 (ours); where their continuous-batching APIs differ, the call is adapted to what is there.

Per model, in this order (each phase guarded: a crash is printed with its traceback, and the check goes on):
1. build: random weights in the target dtype on the device, saved.
2. HF oracle: greedy tokens of HF `generate` for a few prompts, with HF's logits at every step.
3. HF throughput: `--num-prompts` prompts of random token ids (input 100-1024, output 100-1024, no EOS)
   through HF's ContinuousBatchingManager. The HF model is then freed, so both sides get the same memory.
4. ours: LLMEngine loads the saved directory; oracle: our greedy tokens vs HF's. A divergence where HF's
   logits of the two candidates are within `--tie-tol` is reported as a tie (bf16 rounding), not a failure.
5. our throughput on the same prompts.

Both throughput runs of a model get the same time slice, carved from `--budget-s` after reserving an estimate
of the setup still ahead; a run cut short says so, and counts the tokens generated so far. The final tables
come last (whoever reads only the tail of the log gets them); `--json` also writes everything as JSON.
Exit status: 0 when every phase ran and every oracle passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import inspect
import json
import os
import random
import resource
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import torch

T = TypeVar("T")

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
    eager: bool = False
    oracle_only: bool = False


@dataclass
class Throughput:
    system: str
    seconds: float = 0.0
    requests_done: int = 0
    requests: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    peak_mem_mib: float = 0.0
    slice_s: float = 0.0
    cut: bool = False
    error: str = ""  # the run went wrong without raising (failed requests, a dead manager)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tok_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds else 0.0

    def add_note(self, text: str) -> None:
        self.note = f"{self.note}; {text}" if self.note else text


@dataclass
class HFOracle:
    tokens: list[list[int]]
    logits: list[torch.Tensor]  # per prompt: [generated steps, vocab] float32 on the CPU, what HF chose from


@dataclass
class ModelReport:
    name: str
    oracle: list[str] = field(default_factory=list)
    oracle_failed: bool = False
    runs: list[Throughput] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    build_s: float = 0.0
    model_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)  # to calibrate Budget's setup estimates

    @property
    def failed(self) -> bool:
        return self.oracle_failed or bool(self.errors)


# ---- time budget ----------------------------------------------------------------------------------------


def num_params(name: str) -> int:
    s = SHAPES[name]
    hidden, heads, kv = s["hidden_size"], s["num_attention_heads"], s["num_key_value_heads"]
    head_dim = s.get("head_dim", hidden // heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv * head_dim
    layer = attention + 3 * hidden * s["intermediate_size"]
    embeddings = s["vocab_size"] * hidden * (1 if s["tie_word_embeddings"] else 2)
    return s["num_hidden_layers"] * layer + embeddings


class Budget:
    """Wall clock of the whole check, and the slices of it the throughput runs get.

    Setup (build + save, HF warm-up, our load and warm-up) is not sliced: it is estimated per model from its
    weight bytes, generously, and reserved before the runs share what is left equally. Whatever a run does not
    use flows to the runs after it; each model's slice is computed anew with the estimates of what remains.
    """

    TEARDOWN_S = 15.0  # freeing the last model, removing its directory, printing: after the last run ends

    def __init__(self, started: float, budget_s: float, dtype: str) -> None:
        self.end = started + budget_s - self.TEARDOWN_S
        self.bytes_per_param = torch.tensor([], dtype=torch_dtype(dtype)).element_size()

    @staticmethod
    def now() -> float:
        return time.perf_counter()

    def left(self) -> float:
        return self.end - self.now()

    def weight_gb(self, name: str) -> float:
        return num_params(name) * self.bytes_per_param / 1e9

    def setup_estimate(self, name: str) -> float:
        """Build + save + HF oracle and warm-up + our load, oracle and warm-up; ~90 s for 16 GB of weights."""
        return 20.0 + 4.5 * self.weight_gb(name)

    def our_setup_estimate(self, name: str) -> float:
        """Our part of setup_estimate: loading the saved directory back, the oracle, CUDA graphs."""
        return 10.0 + 1.5 * self.weight_gb(name)

    def run_slice(self, name: str, later: Sequence[str]) -> float:
        """Seconds each of this model's two throughput runs gets; called just before its HF run."""
        reserve = self.our_setup_estimate(name) + sum(self.setup_estimate(m) for m in later)
        return max(5.0, (self.left() - reserve) / (2 * (1 + len(later))))

    def hard_end(self, later: Sequence[str]) -> float:
        """No run of this model may pass this, whatever its slice: later models' setup is still to come."""
        return self.end - sum(self.setup_estimate(m) for m in later)


def run_deadline(result: Throughput, started: float, slice_s: float, hard_end: float) -> float:
    result.slice_s = slice_s
    if hard_end < started + slice_s:
        result.add_note(
            f"slice shortened to {max(hard_end - started, 0):.0f}s of {slice_s:.0f}s by the budget"
        )
    return min(started + slice_s, hard_end)


# ---- phases ---------------------------------------------------------------------------------------------


def free_memory(device: str) -> None:
    gc.collect()
    if device.startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def attempt(report: ModelReport, phase: str, device: str, fn: Callable[[], T]) -> T | None:
    """Run one phase; a crash is printed (stdout, in order with the rest) and recorded, and None returned."""
    started = time.perf_counter()
    print(f"[{report.name}] {phase} ...", flush=True)
    try:
        value = fn()
        report.phase_s[phase] = round(time.perf_counter() - started, 1)
        print(f"[{report.name}] {phase} done in {report.phase_s[phase]:.1f}s", flush=True)
        return value
    except Exception as exc:
        print(f"[{report.name}] {phase} CRASHED after {time.perf_counter() - started:.1f}s:", flush=True)
        traceback.print_exc(file=sys.stdout)
        message = (str(exc).strip().splitlines() or [""])[0][:300]
        report.errors.append(f"{phase}: {type(exc).__name__}: {message}")
    finally:
        sys.stdout.flush()
    free_memory(device)  # after the except block, so the traceback's frames (and their tensors) are gone
    return None


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
    # Initialized directly in the final dtype on the device, as from_pretrained(dtype=...) does: 16 GB for
    # the 8B shape, where float32 first would need 48 GB and a cast.
    torch.set_default_dtype(torch_dtype(settings.dtype))
    try:
        with torch.device(settings.device):
            model = model_cls(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    model.generation_config.eos_token_id = eos_id
    # One shard (transformers 5 always writes safetensors): the writer is sequential anyway.
    model.save_pretrained(out_dir, max_shard_size="50GB")
    word_tokenizer(shape["vocab_size"], eos_id).save_pretrained(out_dir)
    if settings.device.startswith("cuda"):
        torch.cuda.synchronize()
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
    free_memory(device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()


def peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # process peak RSS (KiB on Linux)


# ---- Hugging Face side ----------------------------------------------------------------------------------


@torch.inference_mode()
def hf_greedy(model: Any, prompts: list[list[int]], max_new_tokens: int, eos_id: int) -> HFOracle:
    """HF's greedy tokens, and the raw logits each was chosen from (to judge ties once the model is freed)."""
    device = next(model.parameters()).device
    oracle = HFOracle([], [])
    for prompt in prompts:
        ids = torch.tensor([prompt], device=device)
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            eos_token_id=eos_id,
            pad_token_id=eos_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        oracle.tokens.append(out.sequences[0, len(prompt) :].tolist())
        oracle.logits.append(torch.stack([step[0] for step in out.logits]).float().cpu())
    return oracle


def cb_config(settings: Settings) -> Any:
    """The continuous-batching config, for transformers 5.17 (`block_size`) and 5.24 (`page_size`) alike."""
    from transformers import ContinuousBatchingConfig

    known = inspect.signature(ContinuousBatchingConfig).parameters
    page_key = "page_size" if "page_size" in known else "block_size"
    wanted: dict[str, Any]
    if settings.device.startswith("cuda"):
        # HF sizes its cache as a fraction of the memory free now (after its weights); choose the fraction
        # that caps the process at the same share of the device as ours (`gpu_memory_utilization` of total).
        torch.cuda.synchronize()
        total = torch.cuda.mem_get_info()[1]
        used = max(torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
        fraction = (settings.gpu_memory_utilization * total - used) / max(total - used, 1)
        wanted = {"max_memory_percent": min(0.95, max(0.05, fraction))}
    else:
        # On a CPU it would size the cache from free RAM (~14 GB for a tiny model): bound it.
        longest = settings.input_len[1] + settings.output_len[1]
        wanted = {
            page_key: 32,
            "num_blocks": settings.num_prompts * (longest // 32 + 2),
            "max_batch_tokens": 2048,
        }
    # auto_switch_to_flash (5.24): no flash-attn here, and we want the best non-flash path anyway.
    wanted["auto_switch_to_flash"] = False
    return ContinuousBatchingConfig(**{k: v for k, v in wanted.items() if k in known})


def workload_hints(prompts: list[list[int]], outputs: list[int]) -> Any:
    try:
        from transformers.generation.continuous_batching.utils import WorkloadHints
    except ImportError:
        return None
    return WorkloadHints(
        max_prompt_length=max(map(len, prompts)),
        max_generated_length=max(outputs),
        num_requests=len(prompts),
    )


def hf_cache_note(manager: Any) -> str:
    """KV capacity HF chose; attribute names differ between 5.17 (cache.block_size) and 5.24 (page_size)."""
    processor = getattr(manager, "batch_processor", None)
    cache = getattr(processor, "cache", None)
    cb = getattr(manager, "continuous_batching_config", None)
    blocks = getattr(cache, "num_blocks", None)
    size = (
        getattr(cache, "block_size", None)
        or getattr(cb, "page_size", None)
        or getattr(cb, "block_size", None)
    )
    parts = []
    if isinstance(blocks, int) and isinstance(size, int):
        parts.append(f"kv={blocks * size} tokens")
    batch_tokens = getattr(cache, "max_batch_tokens", None)
    if batch_tokens is not None:
        parts.append(f"max_batch_tokens={batch_tokens}")
    graphs = getattr(cb, "use_cuda_graph", None)
    if graphs is not None:
        parts.append(f"cuda_graph={graphs}")
    return ", ".join(parts)


def hf_throughput(
    model: Any,
    prompts: list[list[int]],
    outputs: list[int],
    settings: Settings,
    slice_s: float,
    hard_end: float,
) -> Throughput:
    from transformers import GenerationConfig

    result = Throughput("HF ContinuousBatchingManager", requests=len(prompts))
    reset_peak(settings.device)
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(outputs), eos_token_id=-1, pad_token_id=0)
    kwargs: dict[str, Any] = {
        "generation_config": gen,
        "continuous_batching_config": cb_config(settings),
    }
    hints = workload_hints(prompts, outputs)
    if hints is not None and "workload_hints" in inspect.signature(model.init_continuous_batching).parameters:
        kwargs["workload_hints"] = hints
    manager = model.init_continuous_batching(**kwargs)
    # The manager switches the model to its paged attention (5.17: paged|sdpa; 5.24: sdpa) until stop().
    attn = str(getattr(model.config, "_attn_implementation", "?"))
    accepts_eos = "eos_token_id" in inspect.signature(manager.add_request).parameters
    stop_params = inspect.signature(manager.stop).parameters
    hard = False
    failed: list[str] = []
    try:
        if hasattr(manager, "warmup") and not getattr(manager, "warmed_up", True):
            warm = time.perf_counter()
            manager.warmup()
            result.extra["warmup_s"] = round(time.perf_counter() - warm, 1)
        manager.start()
        started = time.perf_counter()
        deadline = run_deadline(result, started, slice_s, hard_end)
        for i, (prompt, n) in enumerate(zip(prompts, outputs, strict=True)):
            extra = {"eos_token_id": -1} if accepts_eos else {}
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=n, **extra)
        pending = len(prompts)
        while pending:
            if time.perf_counter() > deadline:
                result.cut = True
                break
            out = manager.get_result(timeout=1)
            if out is None:
                if not manager.is_running():
                    result.error = "the manager's generation thread died"
                    result.add_note("the manager stopped early")
                    hard = True
                    break
                continue
            if not out.is_finished():
                continue
            pending -= 1
            result.prompt_tokens += len(out.prompt_ids)
            if getattr(out, "error", None):  # is_finished() is true for failed requests too
                failed.append(str(out.error))
                continue
            result.requests_done += 1
            result.output_tokens += len(out.generated_tokens)
        result.seconds = time.perf_counter() - started
        hard = hard or result.cut
    except BaseException:
        hard = True
        raise
    finally:
        # A flushing stop would keep generating every pending request past the deadline (and into our run);
        # a hard stop fails them at once, delivering the tokens they had.
        stop_kwargs: dict[str, Any] = {"block": True, "timeout": 60}
        if hard and "hard_stop" in stop_params:
            stop_kwargs["hard_stop"] = True
        note = hf_cache_note(manager)
        manager.stop(**stop_kwargs)
        destroy = getattr(model, "destroy_cached_continuous_batching_manager", None)
        if destroy is not None:
            destroy()
        if manager.is_running():
            result.add_note("its generation thread did not stop")
    if result.cut:
        partial = 0
        while (out := manager.get_result(timeout=0.1)) is not None:
            if not out.is_finished():
                continue
            if getattr(out, "error", None):  # failed by the hard stop: the tokens it had
                partial += len(out.generated_tokens)
            else:  # finished just before the stop
                result.requests_done += 1
                result.output_tokens += len(out.generated_tokens)
            result.prompt_tokens += len(out.prompt_ids)
        result.output_tokens += partial
        result.add_note(f"cut at {result.seconds:.0f}s: {partial} tokens of unfinished requests counted")
    if failed:
        result.error = f"{len(failed)} requests failed, e.g. {failed[0][:200]}"
        result.add_note(f"{len(failed)} requests FAILED")
    result.peak_mem_mib = peak_mib(settings.device)
    result.add_note(f"attn={attn}")
    if note:
        result.add_note(note)
    result.extra.update(attn=attn, failed=len(failed))
    return result


# ---- our side -------------------------------------------------------------------------------------------


def has_enforce_eager() -> bool:
    from inference import EngineConfig

    return "enforce_eager" in {f.name for f in dataclasses.fields(EngineConfig)}


def our_engine(model_dir: Path, settings: Settings, max_model_len: int, max_num_seqs: int) -> Any:
    from inference import EngineConfig, LLMEngine

    options: dict[str, Any] = {}
    if settings.eager and has_enforce_eager():
        options["enforce_eager"] = True
    config = EngineConfig(
        model=str(model_dir),
        dtype=settings.dtype,
        device=settings.device,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max(4096, settings.input_len[1]),
        gpu_memory_utilization=settings.gpu_memory_utilization,
        **options,
    )
    return LLMEngine(config)


def our_greedy(engine: Any, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    from inference import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in engine.generate(prompts, params)]


def our_runner_note(engine: Any, settings: Settings, result: Throughput) -> None:
    runner = getattr(engine, "runner", None)
    if runner is None:
        return
    backend = str(getattr(runner, "attention_backend_name", "?"))
    result.add_note(f"kv={getattr(runner, 'kv_capacity_tokens', 0)} tokens, attn={backend}")
    result.extra["attention_backend"] = backend
    sizes = getattr(runner, "cuda_graph_sizes", None)
    if sizes is not None:
        sizes = sorted(int(s) for s in sizes)
        result.extra["cuda_graph_sizes"] = sizes
        result.add_note(
            f"cuda_graphs={len(sizes)} sizes {sizes[0]}..{sizes[-1]}" if sizes else "cuda_graphs=none"
        )
    if settings.eager:
        result.add_note(
            "--eager" if has_enforce_eager() else "--eager ignored: no EngineConfig.enforce_eager"
        )


class StepTimer:
    """Times the runner's forward (device work awaited) inside each engine step; the rest is host work.

    The sampler reads the tokens back right after the forward anyway, so the added sync costs nothing.
    """

    def __init__(self, engine: Any, device: str) -> None:
        self.steps = 0
        self.seconds = 0.0
        self._runner = engine.runner
        self._execute = engine.runner.execute
        cuda = device.startswith("cuda")

        def timed(chunks: Any) -> Any:
            began = time.perf_counter()
            out = self._execute(chunks)
            if cuda:
                torch.cuda.synchronize()
            self.seconds += time.perf_counter() - began
            self.steps += 1
            return out

        self._runner.execute = timed

    def stop(self) -> None:
        self._runner.execute = self._execute


def our_throughput(
    engine: Any,
    prompts: list[list[int]],
    outputs: list[int],
    settings: Settings,
    slice_s: float,
    hard_end: float,
) -> Throughput:
    from inference import SamplingParams

    result = Throughput("ours LLMEngine", requests=len(prompts))
    warm = time.perf_counter()
    engine.generate([prompts[0][:16]], SamplingParams(temperature=0.0, max_tokens=4))
    result.extra["warmup_s"] = round(time.perf_counter() - warm, 1)
    reset_peak(settings.device)
    generated: dict[str, int] = {}
    forward = StepTimer(engine, settings.device)
    started = time.perf_counter()
    deadline = run_deadline(result, started, slice_s, hard_end)
    try:
        for i, (prompt, n) in enumerate(zip(prompts, outputs, strict=True)):
            params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
            engine.add_request(f"r{i}", prompt, params)
        while engine.has_unfinished_requests():
            if time.perf_counter() > deadline:
                result.cut = True
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
    finally:
        forward.stop()
        for i in range(len(prompts)):  # anything cut short at the deadline (or by a crash)
            engine.abort_request(f"r{i}")
        while engine.has_unfinished_requests():
            engine.step()
    if forward.steps:
        step_ms = result.seconds / forward.steps * 1e3
        forward_ms = forward.seconds / forward.steps * 1e3
        result.extra.update(steps=forward.steps, step_ms=round(step_ms, 2), forward_ms=round(forward_ms, 2))
        result.add_note(
            f"{forward.steps} steps, {step_ms:.1f} ms each, {forward_ms:.1f} ms of it the forward"
        )
    if result.cut:
        result.add_note(f"cut at {result.seconds:.0f}s: tokens of unfinished requests counted")
    elif result.requests_done < result.requests:
        result.error = f"only {result.requests_done} of {result.requests} requests finished"
    our_runner_note(engine, settings, result)
    return result


# ---- one model ------------------------------------------------------------------------------------------


def compare_tokens(
    ours: list[int], theirs: list[int], logits: torch.Tensor, settings: Settings, eos_id: int
) -> tuple[str, bool]:
    """(verdict, failed). HF stops at EOS while ours ignores it, so HF's output is compared as a prefix.

    A divergence is a tie when HF's logits for the two tokens are within `tie_tol`, or, in bf16/fp16,
    within two rounding steps of that dtype at those logits' magnitude: summing in another order (a
    fused QKV GEMM, another attention kernel) moves a logit of 20 by 2^-7 * 20 = 0.16 in bf16.
    """
    eps = torch.finfo(torch_dtype(settings.dtype)).eps if settings.dtype != "float32" else 0.0
    for j, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            gap = float(logits[j, b] - logits[j, a])
            magnitude = max(abs(float(logits[j, a])), abs(float(logits[j, b])))
            tol = max(settings.tie_tol, 2 * eps * magnitude)
            if abs(gap) <= tol:
                return (
                    f"tie at token {j} (HF logit gap {gap:.4f} <= {tol:.4f} at |logit| {magnitude:.1f})",
                    False,
                )
            return f"MISMATCH at token {j}: ours {a}, HF {b} (HF logit gap {gap:.4f} > {tol:.4f})", True
    if len(theirs) < len(ours) and (not theirs or theirs[-1] != eos_id):
        return f"HF stopped after {len(theirs)} tokens without EOS", True
    if len(ours) < len(theirs):
        return f"ours stopped after {len(ours)} of HF's {len(theirs)} tokens", True
    return f"equal ({len(theirs)} tokens)", False


def run_model(
    report: ModelReport, settings: Settings, work: Path, budget: Budget, later: Sequence[str]
) -> None:
    """Fills `report` as it goes, so an interrupted model still shows what it did."""
    name = report.name
    device = settings.device
    vocab = SHAPES[name]["vocab_size"]
    eos_id = vocab - 1
    model_dir = work / name
    model_started = time.perf_counter()
    try:
        hf_model = attempt(report, "build", device, lambda: build_model(name, model_dir, settings))
        report.build_s = time.perf_counter() - model_started
        if hf_model is None:
            return
        print(f"[{name}] built and saved in {report.build_s:.1f}s -> {model_dir}", flush=True)

        oracle_in = oracle_prompts(settings, vocab)
        hf_oracle = attempt(
            report,
            "HF oracle",
            device,
            lambda: hf_greedy(hf_model, oracle_in, settings.oracle_tokens, eos_id),
        )
        prompts, outputs = make_prompts(settings, vocab)

        slice_s = budget.run_slice(name, later)
        print(
            f"[{name}] each throughput run gets {slice_s:.0f}s ({budget.left():.0f}s of budget left)",
            flush=True,
        )
        hf_run = None
        if not settings.oracle_only:
            hf_run = attempt(
                report,
                "HF throughput",
                device,
                lambda: hf_throughput(hf_model, prompts, outputs, settings, slice_s, budget.hard_end(later)),
            )
        if hf_run is not None:
            report.runs.append(hf_run)
            if hf_run.error:
                report.errors.append(f"HF throughput: {hf_run.error}")
            print(f"[{name}] HF: {hf_run.tok_s:.0f} output tok/s ({hf_run.note})", flush=True)
        hf_model = None  # both sides get the device to themselves (the lambdas above share this cell)
        free_memory(device)

        longest_oracle = max(len(x) for x in oracle_in) + settings.oracle_tokens
        max_len = max(settings.input_len[1] + settings.output_len[1], longest_oracle) + 16
        engine = attempt(
            report,
            "our engine load",
            device,
            lambda: our_engine(model_dir, settings, max_len, min(256, settings.num_prompts)),
        )
        if engine is None:
            report.oracle.append("not compared: our engine did not load")
            return
        ours_out = attempt(
            report, "our oracle", device, lambda: our_greedy(engine, oracle_in, settings.oracle_tokens)
        )
        if hf_oracle is None or ours_out is None:
            report.oracle.append(
                "not compared: " + ("HF" if hf_oracle is None else "our") + " oracle crashed"
            )
            report.oracle_failed = True
        else:
            for i, (prompt, a, b, logits) in enumerate(
                zip(oracle_in, ours_out, hf_oracle.tokens, hf_oracle.logits, strict=True)
            ):
                verdict, failed = compare_tokens(a, b, logits, settings, eos_id)
                report.oracle.append(f"prompt {i} ({len(prompt)} tokens): {verdict}")
                report.oracle_failed |= failed
        ours_run = None
        if not settings.oracle_only:
            ours_run = attempt(
                report,
                "our throughput",
                device,
                lambda: our_throughput(engine, prompts, outputs, settings, slice_s, budget.hard_end(later)),
            )
        if ours_run is not None:
            report.runs.insert(0, ours_run)
            if ours_run.error:
                report.errors.append(f"our throughput: {ours_run.error}")
            print(f"[{name}] ours: {ours_run.tok_s:.0f} output tok/s ({ours_run.note})", flush=True)
        engine = None
    finally:
        free_memory(device)
        shutil.rmtree(model_dir, ignore_errors=True)
        report.model_s = time.perf_counter() - model_started


# ---- output ---------------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import transformers

    env: dict[str, Any] = {"torch": torch.__version__, "transformers": transformers.__version__}
    if torch.cuda.is_available():
        env["device"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def print_header(settings: Settings) -> None:
    env = ", ".join(f"{k} {v}" for k, v in environment().items())
    print(f"\n## GPU check ({settings.device}, {settings.dtype}, {settings.num_prompts} prompts)\n")
    print(f"{env}; budget {settings.budget_s:.0f}s\n", flush=True)


def print_reports(reports: list[ModelReport], settings: Settings) -> None:
    for report in reports:
        print(f"### {report.name} (built in {report.build_s:.0f}s, {report.model_s:.0f}s in all)")
        verdict = "FAILED" if report.oracle_failed else "ok" if report.oracle else "not run"
        print(f"oracle: {verdict}")
        for line in report.oracle:
            print(f"  - {line}")
        for error in report.errors:
            print(f"  - CRASHED {error}")
        memory = "peak allocated (MiB)" if settings.device.startswith("cuda") else "peak RSS (MiB)"
        print(
            f"\n| system | done/requests | seconds | slice | output tok/s | total tok/s | {memory} | note |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for run in report.runs:
            total = (run.output_tokens + run.prompt_tokens) / run.seconds if run.seconds else 0.0
            note = run.note.replace("|", "\\|")  # "paged|sdpa" would split the markdown cell
            print(
                f"| {run.system} | {run.requests_done}/{run.requests} | {run.seconds:.1f} "
                f"| {run.slice_s:.0f} | {run.tok_s:.0f} | {total:.0f} | {run.peak_mem_mib:.0f} | {note} |"
            )
        by_system = {run.system.split()[0]: run for run in report.runs}
        if "ours" in by_system and "HF" in by_system and by_system["HF"].tok_s:
            cut = " (a run was cut short: compare with care)" if any(r.cut for r in report.runs) else ""
            print(f"\nours/HF output tok/s: {by_system['ours'].tok_s / by_system['HF'].tok_s:.2f}{cut}")
        print()


def write_json(path: str, reports: list[ModelReport], settings: Settings, status: dict[str, Any]) -> None:
    data = {
        "environment": environment(),
        "settings": dataclasses.asdict(settings),
        **status,
        "models": [
            {
                "model": r.name,
                "build_s": r.build_s,
                "model_s": r.model_s,
                "oracle": r.oracle,
                "oracle_failed": r.oracle_failed,
                "errors": r.errors,
                "phase_s": r.phase_s,
                "runs": [dict(dataclasses.asdict(run), tok_s=run.tok_s) for run in r.runs],
            }
            for r in reports
        ],
    }
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
    partial.replace(target)  # a run killed mid-write still leaves the previous complete file


def process_start() -> float:
    """perf_counter() of when the check began: the wrapper's start when it says, else now."""
    began = os.environ.get("GPU_CHECK_T0")
    elapsed = 0.0
    if began:
        try:
            elapsed = max(0.0, time.time() - float(began))
        except ValueError:
            elapsed = 0.0
    return time.perf_counter() - elapsed


def parse_settings(args: argparse.Namespace, p: argparse.ArgumentParser) -> tuple[list[str], Settings] | None:
    if args.smoke:
        return ["tiny-llama"], Settings(
            "cpu",
            "float32",
            8,
            (10, 40),
            (10, 40),
            4,
            16,
            1e-4,
            args.budget_s,
            0.9,
            args.seed,
            args.eager,
            args.oracle_only,
        )
    if not torch.cuda.is_available():
        print("no CUDA device: run with --smoke for the CPU plumbing check", file=sys.stderr)
        return None
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in SHAPES]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(SHAPES)}")
    tie_tol = args.tie_tol if args.tie_tol is not None else (1e-3 if args.dtype == "float32" else 0.1)
    return models, Settings(
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
        args.eager,
        args.oracle_only,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, 8 short prompts")
    p.add_argument("--models", default="qwen3-0.6b,llama3-8b")
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    p.add_argument("--budget-s", type=float, default=420.0, help="wall-clock budget of the whole check")
    p.add_argument("--tie-tol", type=float, default=None, help="HF logit gap treated as a tie")
    # Not 0.9: without flash-attn our torch backend gathers each decode row's K/V (GBs at 256 x 2k tokens),
    # and that working set is not part of the engine's memory profiling step. HF gets the same share.
    p.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    p.add_argument("--eager", action="store_true", help="EngineConfig(enforce_eager=True), where it has that")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--oracle-only", action="store_true", help="skip both throughput runs")
    p.add_argument(
        "--json", dest="json_path", help="also write the reports as JSON (rewritten after each model)"
    )
    args = p.parse_args(argv)
    started = process_start()
    parsed = parse_settings(args, p)
    if parsed is None:
        return 2
    models, settings = parsed
    budget = Budget(started, settings.budget_s, settings.dtype)
    reports: list[ModelReport] = []
    interrupted = ""
    print_header(settings)

    def status() -> dict[str, Any]:
        return {"total_s": round(time.perf_counter() - started, 1), "interrupted": interrupted}

    with tempfile.TemporaryDirectory(prefix="mooncake-gpu-check-") as tmp:
        try:
            for index, name in enumerate(models):
                print(f"[{name}] starting at {time.perf_counter() - started:.0f}s", flush=True)
                reports.append(ModelReport(name))
                run_model(reports[-1], settings, Path(tmp), budget, models[index + 1 :])
                print_reports(reports[-1:], settings)  # now, in case a later model runs out of time
                if args.json_path:
                    write_json(args.json_path, reports, settings, status())
        except KeyboardInterrupt:  # the wrapper's hard timeout: still print what there is
            interrupted = f"interrupted (SIGINT) at {time.perf_counter() - started:.0f}s"
            print(f"\n{interrupted}", flush=True)
    failed = bool(interrupted) or any(r.failed for r in reports) or len(reports) < len(models)
    print("\n## Summary\n")
    print_reports(reports, settings)
    problems = [f"{r.name}: oracle FAILED" for r in reports if r.oracle_failed]
    problems += [f"{r.name}: {e}" for r in reports for e in r.errors]
    problems += [interrupted] if interrupted else []
    problems += [f"{m}: not run" for m in models[len(reports) :]]
    cut = [f"{r.name} {run.system.split()[0]}" for r in reports for run in r.runs if run.cut]
    verdict = "PROBLEMS: " + " | ".join(problems) if problems else "all phases ran, oracle ok"
    if cut:
        verdict += f"; cut short at their slice: {', '.join(cut)}"
    print(f"total {time.perf_counter() - started:.0f}s of a {settings.budget_s:.0f}s budget; {verdict}")
    if args.json_path:
        write_json(args.json_path, reports, settings, status())
        print(f"JSON: {args.json_path}")
    sys.stdout.flush()
    code = 1 if failed else 0
    stragglers = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if stragglers:  # e.g. an HF generation thread that would not stop: do not hang the machine's run on it
        print(f"exiting past live threads: {', '.join(stragglers)}", flush=True)
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
