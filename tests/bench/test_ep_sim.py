"""The expert-parallel dispatch simulation (bench/ep_sim.py): its accounting on traces small enough to count
by hand, the placements, the trace format and skew, and recording ids from our engine's MoE layers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from bench.ep_sim import Placement, balanced, main, round_robin, simulate, step_order
from bench.ep_trace import (
    Skew,
    Trace,
    build_tiny_moe,
    load_trace,
    record,
    save_trace,
    synthetic_logits,
    synthetic_trace,
)
from inference.models.layers.moe.layer import route

HIDDEN = 2048
ROW = HIDDEN * 2  # one token's hidden state in bf16


def hand_trace() -> Trace:
    """One sequence of 4 tokens, 4 experts, top-2. Round-robin on 2 devices puts experts 0 and 2 on device 0,
    1 and 3 on device 1; in a 4-token step tokens 0-1 live on device 0 and 2-3 on device 1."""
    layer0 = np.array([[0, 2], [1, 3], [0, 1], [3, 1]])  # t0 local; t1 both on device 1; t2 split; t3 local
    layer1 = np.array([[0, 2], [2, 0], [1, 3], [3, 1]])  # every pair local
    return Trace({0: layer0, 1: layer1}, np.array([4]), num_experts=4).validate()


def test_round_robin_accounting_by_hand() -> None:
    trace = hand_trace()
    plan = dict.fromkeys(trace.layers, round_robin(4, 2))
    result = simulate(trace, plan, step_tokens=4, hidden=HIDDEN, decode=False)
    # Layer 0: device 0 serves t0 x2 + t2's expert 0 = 3 pairs, device 1 serves 5; layer 1: 4 and 4.
    # Busiest summed over layers 5 + 4 against a mean of 4 + 4.
    assert result.imbalance == pytest.approx(9 / 8)
    # Layer 0: t1 goes to device 1 once (two experts there, one copy), t2 once: 2 sends, 2 partial sums back.
    assert result.bytes_per_step == 2 * 2 * ROW == 16384
    assert result.local_share == pytest.approx((5 + 8) / 16)
    assert (result.steps, result.tokens) == (1, 4)


def test_steps_split_tokens_and_leave_out_a_partial_step() -> None:
    trace = hand_trace()
    only_first = {0: trace.layers[0]}
    result = simulate(
        Trace(only_first, trace.seq_lens, 4),
        {0: round_robin(4, 2)},
        step_tokens=3,
        hidden=HIDDEN,
        decode=False,
    )
    # One step of tokens 0-2 (homes 0, 0, 1): t1 sends to device 1, t2 (home 1) sends to device 0.
    assert (result.steps, result.tokens) == (1, 3)
    assert result.bytes_per_step == 2 * 2 * ROW
    # Decode steps take one position of each sequence before the next position.
    two_seqs = Trace({0: np.zeros((5, 1), dtype=np.int64)}, np.array([2, 3]), 1)
    assert step_order(two_seqs, decode=True).tolist() == [0, 2, 1, 3, 4]
    assert step_order(two_seqs, decode=False).tolist() == [0, 1, 2, 3, 4]


def test_a_replicated_expert_serves_its_tokens_locally() -> None:
    trace = hand_trace()
    # Expert 1 copied onto device 0 too: t1's and t2's expert 1 stays home, t1 still needs expert 3 remotely.
    copied = Placement("copied", 2, [[0], [1, 0], [0], [1]])
    result = simulate(Trace({0: trace.layers[0]}, trace.seq_lens, 4), {0: copied}, 4, HIDDEN, decode=False)
    # Device 0: t0 x2, t1's 1, t2's 0 = 4; device 1: t1's 3, t2's 1, t3 x2 = 4.
    assert result.imbalance == pytest.approx(1.0)
    assert result.bytes_per_step == 2 * 2 * ROW  # t1 -> device 1 (expert 3), t2 -> device 0 (expert 0)
    assert result.local_share == pytest.approx(6 / 8)


def test_balanced_placement_packs_and_copies_hot_experts() -> None:
    loads = np.array([10.0, 1.0, 1.0, 0.0])
    packed = balanced(loads, devices=2, spare_slots=0)
    assert sorted(map(sorted, device_sets(packed))) == [[0, 3], [1, 2]]  # the hot expert beside the idle one
    spare = balanced(loads, devices=2, spare_slots=1)
    assert sorted(spare.replicas[0]) == [0, 1]  # on both devices
    assert all(len(experts) <= 3 for experts in device_sets(spare))  # ceil(4 / 2) + 1 slots each
    assert sorted(e for experts in device_sets(spare) for e in experts) == [0, 0, 1, 1, 2, 3]
    assert round_robin(2, 4).replicas == [[0, 2], [1, 3]]  # more devices than experts: every device used


def device_sets(placement: Placement) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in range(placement.num_devices)]
    for expert, devices in enumerate(placement.replicas):
        for device in devices:
            out[device].append(expert)
    return out


def test_trace_file_round_trip_and_validation(tmp_path: Path) -> None:
    trace = synthetic_trace(
        num_experts=16,
        top_k=4,
        num_layers=3,
        renormalize=True,
        sequences=5,
        length=7,
        skew=Skew(0.5, 1.0, 0.5),
    )
    save_trace(trace, tmp_path / "t.npz")
    loaded = load_trace(tmp_path / "t.npz")
    assert loaded.meta == {"source": "synthetic", "zipf": 0.5, "noise": 1.0, "rho": 0.5, "seed": 0}
    assert loaded.seq_lens.tolist() == [7] * 5 and loaded.num_experts == 16 and loaded.top_k == 4
    for index, ids in trace.layers.items():
        np.testing.assert_array_equal(loaded.layers[index], ids)
    with pytest.raises(ValueError, match="outside"):
        Trace({0: np.array([[0, 16]])}, np.array([1]), 16).validate()


def test_synthetic_ids_come_from_route_and_the_skew_knobs_work() -> None:
    skew = Skew(zipf=1.0, noise=1.0, rho=0.0)
    trace = synthetic_trace(
        num_experts=32, top_k=4, num_layers=1, renormalize=False, sequences=40, length=50, skew=skew, seed=3
    )
    logits = synthetic_logits(np.random.default_rng(3), skew, 32, 40, 50)
    _, ids = route(torch.from_numpy(logits), 4, renormalize=False)
    np.testing.assert_array_equal(trace.layers[0], ids.numpy())

    def routed(zipf: float, rho: float) -> torch.Tensor:
        logits = synthetic_logits(np.random.default_rng(0), Skew(zipf, 1.0, rho), 32, 40, 50)
        return route(torch.from_numpy(logits), 4, renormalize=False)[1].view(40, 50, 4)

    def hottest(zipf: float) -> float:
        counts = torch.bincount(routed(zipf, 0.0).flatten(), minlength=32).float()
        return float(counts.max() / counts.mean())  # 1.12 and 6.7 measured

    def shared_with_next(rho: float) -> float:
        ids = routed(0.0, rho)
        return float((ids[:, 1:, :, None] == ids[:, :-1, None, :]).any(-1).float().mean())  # 0.12, 0.78

    assert hottest(0.0) < 1.5 < 3.0 < hottest(1.0)
    assert shared_with_next(0.0) < 0.25 < 0.5 < shared_with_next(0.95)


def test_record_takes_our_engine_routing_which_matches_hf(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model_dir = build_tiny_moe(tmp_path / "olmoe")
    gen = np.random.default_rng(1)
    sequences = [gen.integers(2, 256, 24).tolist() for _ in range(3)]
    trace = record(model_dir, sequences)
    assert trace.meta["source"] == "recorded" and trace.num_experts == 8 and trace.top_k == 2
    assert list(trace.layers) == [0, 1] and trace.seq_lens.tolist() == [24, 24, 24]
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = reference(torch.tensor(sequences), output_router_logits=True)
    for index, logits in enumerate(out.router_logits):
        hf_ids = torch.topk(torch.softmax(logits.float(), dim=-1), 2, dim=-1).indices
        np.testing.assert_array_equal(trace.layers[index], hf_ids.numpy())


def test_main_records_then_replays_and_runs_both_shapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "recorded.npz"
    assert main(["--record", str(path)]) == 0
    assert load_trace(path).num_tokens == 8 * 64
    assert main(["--trace", str(path), "--devices", "2", "4"]) == 0
    replay = capsys.readouterr().out
    assert "recorded trace, 512 tokens in 8 sequences" in replay
    assert sum(line.split()[0] in {"2", "4"} for line in replay.splitlines() if line.startswith("  ")) == 6
    assert main(["--sequences", "10", "--length", "8", "--devices", "8", "--prefill", "32"]) == 0
    synthetic = capsys.readouterr().out
    assert "zipf 0.3, noise 1.0, rho 0.5" in synthetic
    for name in (
        "OLMoE-1B-7B: 64 experts top-8, 16 MoE layers",
        "Qwen3-30B-A3B: 128 experts top-8, 48 MoE layers",
    ):
        assert name in synthetic
    assert synthetic.count("balanced+1 spare") == 2
