from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inference.core.block_manager import BlockManager
from inference.core.sequence import Sequence
from inference.sampling_params import SamplingParams


def seq(tokens, **kw):
    return Sequence("r", list(tokens), SamplingParams(**kw), max_tokens=8, arrival_time=0.0)


def check_invariants(bm: BlockManager, live: list[Sequence]) -> None:
    refs = Counter(b for s in live for b in s.block_table[s.num_released_blocks :])
    for block in bm.blocks:
        assert block.ref_count == refs.get(block.block_id, 0) >= 0
    assert bm.num_free_blocks == sum(1 for b in bm.blocks if b.ref_count == 0)
    assert bm.num_free_blocks + bm.num_used_blocks == bm.num_blocks


def compute(bm: BlockManager, s: Sequence) -> None:
    s.num_computed_tokens = len(s.token_ids)
    bm.cache_full_blocks(s)


def test_a_windowed_sequence_hands_back_the_blocks_its_window_has_passed():
    bm = BlockManager(8, 4, kv_window=6)
    s = seq(range(18))
    bm.allocate(s, [], 18)
    compute(bm, s)
    # The next row (position 18) sees keys 13..18: blocks 0-2 (positions 0..11) are never read again.
    bm.release_outside_window(s)
    assert s.num_released_blocks == 3 and len(s.block_table) == 5 and bm.num_free_blocks == 6
    check_invariants(bm, [s])
    bm.release_outside_window(s)  # idempotent
    assert bm.num_free_blocks == 6
    # Released blocks are full and hashed: another prompt with the same start still hits them.
    assert bm.match_prefix(seq(range(13))) == s.block_table[:3]
    bm.free(s)
    assert bm.num_free_blocks == 8 and s.num_released_blocks == 0
    check_invariants(bm, [])


def test_without_a_window_nothing_is_released():
    bm = BlockManager(8, 4)
    s = seq(range(18))
    bm.allocate(s, [], 18)
    compute(bm, s)
    bm.release_outside_window(s)
    assert s.num_released_blocks == 0 and bm.num_free_blocks == 3


@pytest.mark.parametrize(("released_at", "shared", "released"), [(16, 4, 2), (19, 0, 0)])
def test_a_fork_shares_only_the_blocks_its_first_rows_still_see(released_at, shared, released):
    """Parent: 19 prompt tokens, window 8, blocks released for a row at `released_at`. The child recomputes
    from position 16 (its last prompt block): when the parent has let go of a block that row still sees,
    the child shares nothing and recomputes the whole prompt."""
    bm = BlockManager(16, 4, kv_window=8)
    parent = seq(range(19))
    bm.allocate(parent, [], 19)
    parent.num_computed_tokens = released_at
    bm.cache_full_blocks(parent)
    bm.release_outside_window(parent)
    compute(bm, parent)
    child = seq(range(19))
    bm.fork(parent, child)
    assert len(child.block_table) == shared and child.num_released_blocks == released
    assert child.num_computed_tokens == shared * 4
    check_invariants(bm, [parent, child])
    bm.free(child)
    bm.free(parent)
    check_invariants(bm, [])


def test_allocate_append_free_round_trip():
    bm = BlockManager(8, 4)
    s = seq(range(10))
    assert bm.can_allocate(s, [], 10)
    bm.allocate(s, [], 10)
    assert len(s.block_table) == 3 and bm.num_free_blocks == 5
    compute(bm, s)
    s.token_ids += [1, 2, 3]
    bm.append(s, 3)
    assert len(s.block_table) == 4
    bm.free(s)
    assert bm.num_free_blocks == 8 and s.block_table == []
    check_invariants(bm, [])


def test_prefix_hit_reuses_computed_full_blocks_and_counts():
    bm = BlockManager(8, 4)
    a = seq(range(10))
    bm.allocate(a, [], 10)
    b = seq(range(10))
    assert bm.match_prefix(b) == []  # a's blocks are not computed yet: no hit on unwritten KV
    compute(bm, a)
    hits = bm.match_prefix(b)
    assert hits == a.block_table[:2]
    bm.allocate(b, hits, 10)
    assert b.num_computed_tokens == 8 and b.block_table[:2] == a.block_table[:2]
    assert bm.prefix_cache_hits == 8 and bm.prefix_cache_queries == 20
    check_invariants(bm, [a, b])


def test_a_hit_always_leaves_one_token_to_compute():
    bm = BlockManager(8, 4)
    a = seq(range(8))
    bm.allocate(a, [], 8)
    compute(bm, a)
    assert len(bm.match_prefix(seq(range(8)))) == 1  # 8 tokens = 2 full blocks, only 1 may hit


def test_freed_cached_blocks_are_reused_lru_then_evicted():
    bm = BlockManager(4, 2)
    a = seq([1, 2, 3, 4, 5])
    bm.allocate(a, [], 5)
    compute(bm, a)
    bm.free(a)
    assert bm.num_free_blocks == 4
    b = seq([1, 2, 3, 4, 9])
    assert len(bm.match_prefix(b)) == 2  # still cached after free
    c = seq(range(100, 108))
    bm.allocate(c, [], 8)  # needs every block: cached ones are evicted
    assert bm.match_prefix(b) == []
    check_invariants(bm, [c])


def test_fork_shares_prompt_blocks_before_the_last_prompt_token():
    bm = BlockManager(16, 4)
    parent = seq(range(9))  # blocks: [0-3] [4-7] [8]
    bm.allocate(parent, [], 9)
    compute(bm, parent)
    child = parent.fork(1)
    bm.fork(parent, child)
    assert child.block_table == parent.block_table[:2] and child.num_computed_tokens == 8
    exact = seq(range(8))
    bm.allocate(exact, [], 8)
    compute(bm, exact)
    child2 = exact.fork(1)
    bm.fork(exact, child2)
    assert child2.num_computed_tokens == 4  # the last full block holds the last prompt token: recompute it
    check_invariants(bm, [parent, child, exact, child2])


def test_double_free_is_an_error_and_not_enough_blocks_refused():
    bm = BlockManager(2, 2)
    s = seq(range(3))
    bm.allocate(s, [], 3)
    blocks = list(s.block_table)
    bm.free(s)
    s.block_table = blocks
    with pytest.raises(ValueError, match="double free"):
        bm.free(s)
    with pytest.raises(ValueError):
        bm.allocate(seq(range(9)), [], 9)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "grow", "fork", "free", "compute"]),
            st.integers(0, 50),
            st.integers(1, 12),
        ),
        max_size=60,
    ),
    st.booleans(),
)
def test_random_operations_never_leak_or_go_negative(ops, caching):
    bm = BlockManager(12, 3, enable_prefix_caching=caching)
    live: list[Sequence] = []
    for op, pick, size in ops:
        target = live[pick % len(live)] if live else None
        if op == "add":
            s = seq([pick % 4] * size)  # few distinct prompts, so prefix hits happen
            hits = bm.match_prefix(s)
            if bm.can_allocate(s, hits, size):
                bm.allocate(s, hits, size)
                live.append(s)
        elif target is None:
            continue
        elif op == "compute":
            target.num_computed_tokens = min(len(target.block_table) * 3, len(target.token_ids))
            bm.cache_full_blocks(target)
        elif op == "grow" and target.num_computed_tokens == len(target.token_ids):
            target.token_ids.append(pick)
            if bm.can_append(target, 1):
                bm.append(target, 1)
        elif op == "fork" and target.num_computed_tokens >= target.num_prompt_tokens:
            child = target.fork(1)
            bm.fork(target, child)
            live.append(child)
        elif op == "free":
            bm.free(target)
            live.remove(target)
        check_invariants(bm, live)
    for s in live:
        bm.free(s)
    check_invariants(bm, [])
    assert bm.num_free_blocks == bm.num_blocks
