"""Memory planning with made-up sizes: which listed model does not fit, by how much, and what would."""

from __future__ import annotations

import re

from inference.manager.memory_plan import GIB, Footprint, plan_memory

TOKEN = 1 << 20  # one MiB of KV per token keeps the arithmetic readable


def _model(name: str, index: int, weights_gib: float, kv_gib: float, **extra: object) -> Footprint:
    return Footprint(
        name=name,
        key=f"model.models[{index}]",
        weights_bytes=int(weights_gib * GIB),
        kv_bytes=int(kv_gib * GIB),
        kv_bytes_per_token=TOKEN,
        max_model_len=int(kv_gib * GIB) // TOKEN,
        **extra,  # type: ignore[arg-type]
    )


def test_models_that_fit_the_budget_are_ok() -> None:
    plan = plan_memory(
        [_model("a", 0, 2, 1), _model("b", 1, 3, 1)], budget_bytes=8 * GIB, budget_source="the budget"
    )
    assert plan.ok and plan.fits == ["a", "b"]


def test_the_model_that_does_not_fit_is_named_with_the_shortfall_and_a_length_that_fits() -> None:
    plan = plan_memory(
        [_model("a", 0, 2, 1), _model("b", 1, 3, 4)], budget_bytes=8 * GIB, budget_source="the budget"
    )
    assert plan.fits == ["a"] and list(plan.problems) == ["b"]
    message = plan.problems["b"]
    assert message.startswith("b (model.models[1]) does not fit")
    assert "2.00 GiB more than the 8.00 GiB that the budget allows" in message
    # 8 - 3 (a) - 3 (b's weights) leaves 2 GiB: 2048 tokens at 1 MiB each.
    assert "Set model.models[1].max_model_len to 2048 or less (now 4096)." in message
    assert "Or raise the budget to 10737418240 bytes or more." in message


def test_a_model_left_out_does_not_count_against_later_ones() -> None:
    plan = plan_memory(
        [_model("big", 0, 10, 1), _model("small", 1, 1, 1)], budget_bytes=4 * GIB, budget_source="x"
    )
    assert plan.fits == ["small"] and list(plan.problems) == ["big"]
    assert "Its weights alone" not in plan.problems["big"]  # but there is no length that fits either
    assert "max_model_len" not in plan.problems["big"]


def test_cpu_default_kv_is_sized_for_every_sequence() -> None:
    # 64 sequences share the KV cache: the fitting length is the room over 64 sequences.
    model = _model("a", 0, 1, 4, kv_sequences=64)
    message = plan_memory([model], budget_bytes=3 * GIB, budget_source="x").problems["a"]
    assert "max_model_len to 32 or less with max_num_seqs 64" in message
    assert "kv_cache_memory_bytes to 2147483648 or less (then max_model_len 2048 at most)" in message


def test_gpu_ceilings_suggest_a_utilization_and_earlier_models_fill_theirs() -> None:
    total = 100 * GIB
    first = _model("a", 0, 20, 1, ceiling_bytes=90 * GIB, fills_ceiling=True)
    second = _model("b", 1, 10, 1, ceiling_bytes=85 * GIB, fills_ceiling=True)
    plan = plan_memory([first, second], budget_bytes=None, budget_source="-", device_total_bytes=total)
    # a's KV cache grows to its 0.90 ceiling, so b (0.85) has nothing left.
    assert plan.fits == ["a"]
    message = plan.problems["b"]
    assert "model.models[1].gpu_memory_utilization" in message
    assert "The device is too small for it beside the models before it" in message

    first = _model("a", 0, 20, 1, ceiling_bytes=40 * GIB, fills_ceiling=True)
    second = _model("b", 1, 10, 1, ceiling_bytes=45 * GIB, fills_ceiling=True)
    plan = plan_memory([first, second], budget_bytes=None, budget_source="-", device_total_bytes=total)
    assert plan.fits == ["a"]
    suggested = re.search(r"gpu_memory_utilization to (\d\.\d\d) or more", plan.problems["b"])
    assert suggested is not None and float(suggested.group(1)) == 0.51  # 40 + 11 GiB of 100


def test_gpu_models_within_their_ceilings_fit() -> None:
    first = _model("a", 0, 20, 1, ceiling_bytes=45 * GIB, fills_ceiling=True)
    second = _model("b", 1, 10, 1, ceiling_bytes=90 * GIB, fills_ceiling=True)
    plan = plan_memory([first, second], budget_bytes=None, budget_source="-", device_total_bytes=100 * GIB)
    assert plan.ok and plan.fits == ["a", "b"]


def test_the_cpu_default_rule_suggests_a_length_after_the_other_sequences_share() -> None:
    # One full context plus 1024 tokens for the other sequences: the fitting length is the room left after
    # those 1024 tokens.
    model = _model("a", 0, 1, 4, kv_extra_tokens=1024)
    message = plan_memory([model], budget_bytes=3 * GIB, budget_source="x").problems["a"]
    assert "max_model_len to 1024 or less (or a lower max_num_seqs) (now 4096)" in message
    assert "kv_cache_memory_bytes to 2147483648 or less" in message
