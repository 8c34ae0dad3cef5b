"""The memory-bound floor of a decode step, and our steps measured against it.

A decode step must read every weight once (the input embedding only for its rows) and the KV cache of every
sequence it attends to; at the device's bandwidth that is its floor, however fast the kernels are. The
bandwidth is a copy ceiling (bytes read + written per second): 4.3 TB/s measured on the H200
(docs/design/gpu-path.md), `--bandwidth-gbs` to override; on a CPU it is measured here with a quick `copy_`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from bench.gpu_check.zoo import SHAPES, num_params, torch_dtype

H200_COPY_BYTES_PER_S = 4.3e12


def dtype_bytes(dtype: str) -> int:
    return torch.tensor([], dtype=torch_dtype(dtype)).element_size()


def weight_read_bytes(name: str, dtype: str) -> int:
    """Bytes of weights one decode step reads: all of them, but an untied input embedding only by row."""
    shape = SHAPES[name]
    params = num_params(name)
    if not shape["tie_word_embeddings"]:
        params -= shape["vocab_size"] * shape["hidden_size"]
    return params * dtype_bytes(dtype)


def kv_bytes_per_token(name: str, dtype: str) -> int:
    s = SHAPES[name]
    head_dim = s.get("head_dim", s["hidden_size"] // s["num_attention_heads"])
    return s["num_hidden_layers"] * 2 * s["num_key_value_heads"] * head_dim * dtype_bytes(dtype)


def cpu_copy_bandwidth(mib: int = 128, repeats: int = 5) -> float:
    """Bytes read + written per second by the best of a few copy_ calls of `mib` MiB."""
    src = torch.ones(mib << 18, dtype=torch.float32)  # mib MiB
    dst = torch.empty_like(src)
    dst.copy_(src)  # first touch
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return 2 * src.numel() * src.element_size() / best


def bandwidth(device: str, override_gbs: float | None) -> tuple[float, str]:
    """(bytes per second, where the number comes from)."""
    if override_gbs:
        return override_gbs * 1e9, "--bandwidth-gbs"
    if device.startswith("cuda"):
        return H200_COPY_BYTES_PER_S, "H200 copy ceiling from docs/design/gpu-path.md"
    return cpu_copy_bandwidth(), "copy_ measured here"


@dataclass
class StepLog:
    """One step() of a throughput run, as the host saw it."""

    seconds: list[float] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)  # running sequences when the step began
    kv_tokens: list[int] = field(default_factory=list)  # their tokens: the KV the step attends to
    decode_only: list[bool] = field(default_factory=list)  # nothing waiting, every running seq decoding

    def add(self, seconds: float, rows: int, kv_tokens: int, decode_only: bool) -> None:
        self.seconds.append(seconds)
        self.rows.append(rows)
        self.kv_tokens.append(kv_tokens)
        self.decode_only.append(decode_only)


def floor_report(log: StepLog, name: str, dtype: str, bytes_per_s: float, source: str) -> dict[str, object]:
    """Full-batch decode steps (decode only, at least 90% of the largest batch seen) against their floor."""
    if not log.seconds:
        return {}
    weights = weight_read_bytes(name, dtype)
    per_token = kv_bytes_per_token(name, dtype)
    decode = [i for i, d in enumerate(log.decode_only) if d and log.rows[i]]
    if not decode:
        return {"floor": "no decode-only steps"}
    top = max(log.rows[i] for i in decode)
    full = [i for i in decode if log.rows[i] >= 0.9 * top]
    step_s = sum(log.seconds[i] for i in full) / len(full)
    kv = sum(log.kv_tokens[i] for i in full) / len(full) * per_token
    floor_s = (weights + kv) / bytes_per_s
    batch = sum(log.rows[i] for i in full) / len(full)
    line = (
        f"{len(full)} full-batch decode steps (batch {batch:.0f}): {step_s * 1e3:.2f} ms each; floor "
        f"{floor_s * 1e3:.2f} ms (weights {weights / 1e6:.1f} MB + KV {kv / 1e6:.1f} MB at "
        f"{bytes_per_s / 1e12:.2f} TB/s, {source}): {step_s / floor_s:.1f}x the floor"
    )
    return {
        "floor": line,
        "floor_ms": round(floor_s * 1e3, 3),
        "decode_step_ms": round(step_s * 1e3, 3),
        "floor_ratio": round(step_s / floor_s, 2),
        "decode_batch": round(batch, 1),
        "bandwidth_gbs": round(bytes_per_s / 1e9, 1),
    }
