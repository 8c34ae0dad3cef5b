"""The correctness oracle: HF's greedy tokens (with the logits they came from) against ours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bench.gpu_check.report import Settings
from bench.gpu_check.zoo import torch_dtype


@dataclass
class HFOracle:
    tokens: list[list[int]]
    logits: list[torch.Tensor]  # per prompt: [generated steps, vocab] float32 on the CPU, what HF chose from


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
