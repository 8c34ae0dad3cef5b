"""Hugging Face's continuous batching across transformers 5.17 (the GPU machine's) and 5.24 (ours).

Each function asks the installed version what it has (a parameter, an attribute) rather than its number.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import torch

from bench.gpu_check.report import Settings


def cb_config(settings: Settings) -> Any:
    """The continuous-batching config: 5.17 calls the page `block_size`, 5.24 `page_size`."""
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


def _workload_hints(prompts: list[list[int]], outputs: list[int]) -> Any:
    try:
        from transformers.generation.continuous_batching.utils import WorkloadHints
    except ImportError:
        return None
    return WorkloadHints(
        max_prompt_length=max(map(len, prompts)),
        max_generated_length=max(outputs),
        num_requests=len(prompts),
    )


def init_manager(model: Any, prompts: list[list[int]], outputs: list[int], settings: Settings) -> Any:
    """A ContinuousBatchingManager for greedy decoding that never stops at EOS (not started yet)."""
    from transformers import GenerationConfig

    gen = GenerationConfig(do_sample=False, max_new_tokens=max(outputs), eos_token_id=-1, pad_token_id=0)
    kwargs: dict[str, Any] = {"generation_config": gen, "continuous_batching_config": cb_config(settings)}
    hints = _workload_hints(prompts, outputs)
    if hints is not None and "workload_hints" in inspect.signature(model.init_continuous_batching).parameters:
        kwargs["workload_hints"] = hints
    return model.init_continuous_batching(**kwargs)


def warm_up(manager: Any) -> float | None:
    """Seconds spent warming up, where this version has (and has not yet done) a warm-up."""
    if not hasattr(manager, "warmup") or getattr(manager, "warmed_up", True):
        return None
    began = time.perf_counter()
    manager.warmup()
    return round(time.perf_counter() - began, 1)


def request_kwargs(manager: Any) -> dict[str, Any]:
    """add_request's extra arguments: EOS off per request where the version takes it."""
    return {"eos_token_id": -1} if "eos_token_id" in inspect.signature(manager.add_request).parameters else {}


def stop(model: Any, manager: Any, *, hard: bool) -> None:
    """Stop the manager; a hard stop (where there is one) fails pending requests at once.

    A flushing stop would keep generating every pending request past the deadline (and into our run).
    """
    kwargs: dict[str, Any] = {"block": True, "timeout": 60}
    if hard and "hard_stop" in inspect.signature(manager.stop).parameters:
        kwargs["hard_stop"] = True
    manager.stop(**kwargs)
    destroy = getattr(model, "destroy_cached_continuous_batching_manager", None)
    if destroy is not None:
        destroy()


def cache_note(manager: Any) -> str:
    """KV capacity HF chose: 5.17 keeps the page size on the cache (block_size), 5.24 on the config."""
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
