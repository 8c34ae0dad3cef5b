"""Where a mixture-of-experts model's decode time goes in our engine: routing (the router's linear, softmax
and top-k, grouping tokens by expert), the expert GEMMs, attention (its projections and the paged attention)
and the rest (norms, embedding, head, sampling, scheduling).

    python -m bench.moe_split MODEL.gguf [--concurrency 1 16] [--tokens 32]

Offline (no web server), bf16 on CPU as `make run` serves a GGUF; each concurrency runs its requests to
`--tokens` generated tokens after a warm-up, and the split is of the whole generate() wall time.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from inference.models.layers.linear.moe import layer as moe

from inference import EngineConfig, LLMEngine, SamplingParams
from inference.models.architectures.decoder import DecoderAttention
from inference.models.loader.load import load_model

TOTALS: dict[str, float] = defaultdict(float)


def timed(part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTALS[part] += time.perf_counter() - started

    return wrapper


def instrument(model: Any) -> None:
    moe.experts_by_group = timed("expert GEMMs", moe.experts_by_group)  # type: ignore[assignment]
    # Per instance: families subclass the attention (OLMoE's norms) with forwards of their own.
    for module in model.modules():
        if isinstance(module, moe.SparseMoE):
            module.forward = timed("moe block", module.forward)  # type: ignore[method-assign]
        elif isinstance(module, DecoderAttention):
            module.forward = timed("attention", module.forward)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--cache-dir", default="var/cache")
    args = parser.parse_args()
    from pathlib import Path

    loaded = load_model(args.model, dtype="bfloat16", device="cpu", cache_dir=Path(args.cache_dir))
    engine = LLMEngine(
        EngineConfig(model=args.model, dtype="bfloat16", device="cpu", max_model_len=1024), loaded=loaded
    )
    prompt = list(loaded.tokenizer.encode("Write a short story about a lighthouse keeper and a storm."))
    params = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    engine.generate([prompt], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))  # warm-up
    instrument(loaded.model)
    print("| concurrency | tok/s | routing | expert GEMMs | attention | other |")
    print("|---|---|---|---|---|---|")
    for concurrency in args.concurrency:
        TOTALS.clear()
        started = time.perf_counter()
        outs = engine.generate([prompt] * concurrency, params)
        wall = time.perf_counter() - started
        tokens = sum(len(o.outputs[0].token_ids) for o in outs)
        routing = TOTALS["moe block"] - TOTALS["expert GEMMs"]
        parts = [routing, TOTALS["expert GEMMs"], TOTALS["attention"]]
        other = wall - sum(parts)
        shares = " | ".join(f"{100 * p / wall:.0f}%" for p in [*parts, other])
        print(f"| {concurrency} | {tokens / wall:.1f} | {shares} |")


if __name__ == "__main__":
    main()
