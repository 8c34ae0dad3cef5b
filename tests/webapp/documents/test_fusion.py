"""Reciprocal rank fusion: scores, order, ties and repeats."""

from __future__ import annotations

import pytest

from webapp.documents.fusion import K, reciprocal_rank_fusion


def test_each_ranking_adds_one_over_k_plus_rank() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b"], ["b", "c"]]))
    assert K == 60
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 62)


def test_an_item_both_rankings_place_well_beats_the_first_of_one() -> None:
    full_text = ["x", "shared", "y"]
    meaning = ["z", "shared", "w"]
    assert [item for item, _ in reciprocal_rank_fusion([full_text, meaning])][:1] == ["shared"]


def test_an_item_only_one_ranking_has_still_counts() -> None:
    assert [item for item, _ in reciprocal_rank_fusion([[], [7, 3]])] == [7, 3]
    assert reciprocal_rank_fusion([[], []]) == []


def test_ties_go_to_the_better_single_rank_then_the_earlier_ranking() -> None:
    # "a" and "p" tie (1/61 each): "a" is in the first ranking.
    assert [item for item, _ in reciprocal_rank_fusion([["a"], ["p"]])] == ["a", "p"]
    # n: 1/62 + 1/61 beats m: 1/61 + 1/63, though m is first in the first ranking.
    order = [item for item, _ in reciprocal_rank_fusion([["m", "n", "o"], ["n", "q", "m"]])]
    assert order[:2] == ["n", "m"]


def test_a_repeat_within_one_ranking_counts_once_at_its_first_place() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "a"]]))
    assert fused == {"a": pytest.approx(1 / 61), "b": pytest.approx(1 / 62)}


def test_k_shapes_how_much_the_first_ranks_weigh() -> None:
    assert dict(reciprocal_rank_fusion([["a"]], k=0)) == {"a": 1.0}
    with pytest.raises(ValueError, match="k must be"):
        reciprocal_rank_fusion([["a"]], k=-1)
