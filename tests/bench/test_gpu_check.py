"""The GPU check's CPU-side logic: the oracle's verdicts, the time budget's slices, the summary line."""

from __future__ import annotations

import torch

from bench.gpu_check.budget import Budget, run_deadline
from bench.gpu_check.cli import parse_settings, parser
from bench.gpu_check.oracle import compare_tokens
from bench.gpu_check.report import ModelReport, Settings, Throughput, verdict
from bench.gpu_check.zoo import SHAPES, num_params


def settings(dtype: str = "bfloat16", tie_tol: float = 0.1) -> Settings:
    args = parser().parse_args(["--smoke"])
    parsed = parse_settings(args, parser())
    assert parsed is not None
    smoke = parsed[1]
    smoke.dtype, smoke.tie_tol = dtype, tie_tol
    return smoke


def logits(rows: int, **at: float) -> torch.Tensor:
    out = torch.zeros(rows, 8)
    for key, value in at.items():
        row, token = (int(x) for x in key[1:].split("_"))
        out[row, token] = value
    return out


def test_equal_tie_and_mismatch() -> None:
    eos = 7
    assert compare_tokens([1, 2], [1, 2], logits(2), settings(), eos) == ("equal (2 tokens)", False)
    close = logits(2, r1_2=20.0, r1_3=19.95)  # HF chose 2, ours 3: within bf16 rounding at |20|
    verdict_text, failed = compare_tokens([1, 3], [1, 2], close, settings(), eos)
    assert verdict_text.startswith("tie at token 1") and not failed
    far = logits(2, r1_2=20.0, r1_3=10.0)
    verdict_text, failed = compare_tokens([1, 3], [1, 2], far, settings("float32", 1e-3), eos)
    assert verdict_text.startswith("MISMATCH at token 1") and failed
    # HF stops at EOS, ours ignores it: a prefix ending in EOS is equal, one without is not.
    assert not compare_tokens([1, 7, 4], [1, 7], logits(3), settings(), eos)[1]
    assert compare_tokens([1, 2, 4], [1, 2], logits(3), settings(), eos)[1]


def test_budget_reserves_later_setup_and_shares_the_rest() -> None:
    budget = Budget(started=Budget.now(), budget_s=420.0, dtype="bfloat16")
    assert num_params("llama3-8b") > 7e9 and set(SHAPES) >= {"qwen3-0.6b", "llama3-8b", "tiny-llama"}
    alone = budget.run_slice("qwen3-0.6b", [])
    before_8b = budget.run_slice("qwen3-0.6b", ["llama3-8b"])
    assert 5.0 <= before_8b < alone
    result = Throughput("ours")
    deadline = run_deadline(result, started=0.0, slice_s=100.0, hard_end=40.0)
    assert deadline == 40.0 and result.slice_s == 100.0 and "shortened" in result.note


def test_verdict_names_every_problem() -> None:
    ok = ModelReport("a", oracle=["equal"])
    assert verdict([ok], ["a"], "") == "all phases ran, oracle ok"
    bad = ModelReport("b", oracle_failed=True, errors=["build: boom"])
    line = verdict([ok, bad], ["a", "b", "c"], "")
    assert "b: oracle FAILED" in line and "b: build: boom" in line and "c: not run" in line


def test_floor_of_a_decode_step() -> None:
    from bench.gpu_check.floor import StepLog, floor_report, kv_bytes_per_token, weight_read_bytes

    assert kv_bytes_per_token("qwen3-0.6b", "bfloat16") == 28 * 2 * 8 * 128 * 2
    assert weight_read_bytes("qwen3-0.6b", "bfloat16") == 2 * num_params("qwen3-0.6b")  # tied: one table
    untied = num_params("llama3-8b") - 128256 * 4096  # the input embedding is read by row only
    assert weight_read_bytes("llama3-8b", "float32") == 4 * untied
    log = StepLog()
    log.add(0.5, 256, 1000, False)  # a prefill step: left out
    for _ in range(3):
        log.add(0.010, 256, 256 * 700, True)
    log.add(0.002, 10, 10 * 700, True)  # a small batch at the tail: left out
    report = floor_report(log, "qwen3-0.6b", "bfloat16", 4.3e12, "test")
    floor_s = (weight_read_bytes("qwen3-0.6b", "bfloat16") + 256 * 700 * 28 * 2 * 8 * 128 * 2) / 4.3e12
    assert report["decode_batch"] == 256 and report["decode_step_ms"] == 10.0
    assert abs(float(report["floor_ms"]) - floor_s * 1e3) < 1e-3  # type: ignore[arg-type]
    assert report["floor_ratio"] == round(0.010 / floor_s, 2)


def test_cli_async_and_bandwidth_options() -> None:
    smoke = parse_settings(parser().parse_args(["--smoke"]), parser())
    assert smoke is not None and smoke[1].async_scheduling is True  # the CPU plumbing check pipelines
    synced = parse_settings(
        parser().parse_args(["--smoke", "--sync-steps", "--bandwidth-gbs", "50"]), parser()
    )
    assert synced is not None and synced[1].async_scheduling is False and synced[1].bandwidth_gbs == 50.0
