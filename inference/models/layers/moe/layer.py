"""Mixture-of-experts feed-forward: an fp32 router, then each expert run once over the tokens routed to it.

On CPU the (token, expert) pairs are grouped by expert and every expert that received tokens runs one call
over all of its rows (a GatedMLP, so a GGUF's expert blocks are read as stored like any projection). On CUDA,
where every expert keeps a dense weight, the experts' weights are viewed as one stacked tensor and a fused
Triton grouped GEMM (layers/moe/fused_experts.py) computes all of them in two launches.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from inference.models.layers.linear import Linear
from inference.models.layers.mlp import GatedMLP


@dataclass(frozen=True, slots=True)
class MoEArgs:
    num_experts: int
    top_k: int
    expert_intermediate: int
    renormalize: bool  # divide the top-k probabilities by their sum (Mixtral; Qwen-MoE/OLMoE: norm_topk_prob)
    # Qwen-MoE and OLMoE round the routing weights to the model's dtype before mixing; Mixtral keeps fp32.
    weights_in_model_dtype: bool
    shared_intermediate: int = 0  # Qwen2-MoE: a shared expert every token takes, behind a sigmoid gate


def route(logits: torch.Tensor, top_k: int, *, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Routing weights [T, k] (fp32) and expert ids [T, k] from router logits [T, E]: softmax in fp32 over
    every expert, then the top k, optionally renormalised to sum to one (the reference's order)."""
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def experts_by_group(
    x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, experts: nn.ModuleList
) -> torch.Tensor:
    """sum_k weights[t, k] * experts[ids[t, k]](x[t]) for every token t, one expert call per routed group.

    Experts are visited in ascending order and each adds into the output once per token it serves, the
    reference's order of accumulation, so fp32 results match it to rounding."""
    top_k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=len(experts)).tolist()  # one host sync per layer
    flat_weights = weights.flatten()
    out = torch.zeros_like(x)
    start = 0
    for expert, count in zip(experts, counts, strict=True):
        if count == 0:
            continue
        pairs = order[start : start + count]
        start += count
        tokens = pairs // top_k
        rows = expert(x.index_select(0, tokens)) * flat_weights.index_select(0, pairs)[:, None]
        out.index_add_(0, tokens, rows.to(out.dtype))
    return out


class SparseMoE(nn.Module):
    """The router (`gate`), the routed experts and, where the family has one, the gated shared expert."""

    def __init__(self, hidden: int, moe: MoEArgs) -> None:
        super().__init__()
        self.moe = moe
        self.gate = Linear(hidden, moe.num_experts, bias=False)
        self.experts = nn.ModuleList(
            GatedMLP(hidden, moe.expert_intermediate, bias=False) for _ in range(moe.num_experts)
        )
        self.shared_expert: GatedMLP | None = None
        self.shared_expert_gate: Linear | None = None
        if moe.shared_intermediate:
            self.shared_expert = GatedMLP(hidden, moe.shared_intermediate, bias=False)
            self.shared_expert_gate = Linear(hidden, 1, bias=False)
        self._stacked: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, ids = route(self.gate(x), self.moe.top_k, renormalize=self.moe.renormalize)
        if self.moe.weights_in_model_dtype:
            weights = weights.to(x.dtype)
        stacked = self.stacked_experts(x)
        if stacked is not None:
            from inference.models.layers.moe.fused_experts import (
                fused_moe,  # Triton is imported only where it runs
            )

            out = fused_moe(x, stacked[0], stacked[1], weights.float(), ids)
        else:
            out = experts_by_group(x, weights, ids, self.experts)
        if self.shared_expert is not None and self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out

    def fused_ready(self, device: torch.device, dtype: torch.dtype) -> bool:
        """Whether rows on `device` take the fused kernel (stacking the experts now if so). The per-expert
        path reads its group sizes on the host, which a CUDA graph cannot capture."""
        probe = torch.zeros(1, self.gate.in_features, device=device, dtype=dtype)
        return self.stacked_experts(probe) is not None

    def stacked_experts(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The experts' gate_up [E, 2I, H] and down [E, H, I] weights as one tensor each, for the fused
        kernel, or None where it does not run (CPU, quantized experts, a shape it does not take). Built once:
        each expert's parameters then become views into the stacked tensors, so there is still one copy."""
        if x.device.type != "cuda":
            return None
        if self._stacked is None:
            mlps = [expert for expert in self.experts if isinstance(expert, GatedMLP)]
            if any(not m.gate_up_proj.method.keeps_dense or not m.down_proj.method.keeps_dense for m in mlps):
                return None
            from inference.models.layers.linear.moe import fused_experts as moe_triton

            gate_up = torch.stack([m.gate_up_proj.weight.detach() for m in mlps])
            down = torch.stack([m.down_proj.weight.detach() for m in mlps])
            if not moe_triton.supports(x, gate_up):
                return None
            for index, mlp in enumerate(mlps):
                mlp.gate_up_proj.weight = nn.Parameter(gate_up[index], requires_grad=False)
                mlp.down_proj.weight = nn.Parameter(down[index], requires_grad=False)
            self._stacked = (gate_up, down)
        return self._stacked
