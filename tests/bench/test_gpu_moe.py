"""The GPU MoE check's plumbing on a tiny fp32 shape (Triton's CPU interpreter without a GPU)."""

from __future__ import annotations

import pytest
import torch

import inference.models.layers.moe.fused_experts
from bench.gpu_moe import SMOKE, check_moe

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    if DEVICE == "cpu":  # read when the kernels are first defined
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_check_passes_and_prints_a_row_per_batch(capsys: pytest.CaptureFixture[str]) -> None:
    assert check_moe(SMOKE, (1, 5), DEVICE, torch.float32) == []
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[1:]] == ["1", "5"]  # after the header


def test_check_reports_a_wrong_result(monkeypatch: pytest.MonkeyPatch) -> None:
    def half(*args: torch.Tensor) -> torch.Tensor:
        return inference.models.layers.moe.fused_experts.moe_reference(*args) * 0.5

    monkeypatch.setattr(inference.models.layers.moe.fused_experts, "fused_moe", half)
    failures = check_moe(SMOKE, (5,), DEVICE, torch.float32)
    assert len(failures) == 1 and failures[0].startswith("moe tokens=5: relative error")
