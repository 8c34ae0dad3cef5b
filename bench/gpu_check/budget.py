"""The check's wall-clock budget, and the slices of it each throughput run gets."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import torch

from bench.gpu_check.report import Throughput
from bench.gpu_check.zoo import num_params, torch_dtype


def process_start() -> float:
    """perf_counter() of when the check began: the wrapper's start (GPU_CHECK_T0) when it says, else now."""
    began = os.environ.get("GPU_CHECK_T0")
    elapsed = 0.0
    if began:
        try:
            elapsed = max(0.0, time.time() - float(began))
        except ValueError:
            elapsed = 0.0
    return time.perf_counter() - elapsed


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
